// Forwards net/log.h lines to NCCL's logger, so NCCL_DEBUG and NCCL_DEBUG_SUBSYS=NET govern them and
// they land in NCCL's own log file next to NCCL's lines.
#include <atomic>

#include "net/log.h"
#include "plugin/net/net_plugin.h"

namespace sieve::plugin {

namespace {

std::atomic<abi::ncclDebugLogger_t> g_logger{nullptr};

abi::ncclDebugLogLevel nccl_level(log::Level level) {
  switch (level) {
    case log::Level::Warn: return abi::NCCL_LOG_WARN;
    case log::Level::Info: return abi::NCCL_LOG_INFO;
    case log::Level::Trace: return abi::NCCL_LOG_TRACE;
    default: return abi::NCCL_LOG_NONE;
  }
}

void forward(log::Level level, const char* file, int line, const char* message) {
  abi::ncclDebugLogger_t logger = g_logger.load();
  if (logger) logger(nccl_level(level), abi::NCCL_NET, file, line, "%s", message);
}

}  // namespace

void install_nccl_logger(abi::ncclDebugLogger_t logger) {
  g_logger.store(logger);
  log::set_sink(logger ? forward : nullptr);
}

}  // namespace sieve::plugin
