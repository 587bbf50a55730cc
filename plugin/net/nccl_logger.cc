// SPDX-License-Identifier: Apache-2.0
// Forwards net/log.h lines to NCCL's logger, so NCCL_DEBUG and NCCL_DEBUG_SUBSYS govern them and
// they land in NCCL's own log file next to NCCL's lines. Each subsystem goes out as the flags NCCL's
// own code uses for such lines (its IB transport logs set-up as INIT|NET), warnings as NCCL's WARN
// does (every flag: NCCL prints a warning whatever NCCL_DEBUG_SUBSYS selects).
//
// NCCL's logger formats only what it prints, but it takes a format and arguments, never a va_list, so
// Sieve formats before the call: to format only what NCCL will print, Sieve reads the same two
// variables (NCCL has copied nccl.conf into the environment by the time it loads a plugin). A value it
// cannot read passes everything, leaving the choice to NCCL; so does NCCL_DEBUG unset, where NCCL
// prints nothing but a stand-in for NCCL (tools/nccl_emulator, with a level of its own) may.
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "net/log.h"
#include "plugin/net/net_plugin.h"

namespace sieve::plugin {

namespace {

std::atomic<abi::ncclDebugLogger_t> g_logger{nullptr};

abi::ncclDebugLogLevel nccl_level(log::Level level) {
  switch (level) {
    case log::Level::kWarn: return abi::NCCL_LOG_WARN;
    case log::Level::kInfo: return abi::NCCL_LOG_INFO;
    case log::Level::kTrace: return abi::NCCL_LOG_TRACE;
    default: return abi::NCCL_LOG_NONE;
  }
}

void forward(log::Level level, log::Subsystem subsystem, const char* file, int line, const char* message) {
  abi::ncclDebugLogger_t logger = g_logger.load();
  if (logger)
    logger(nccl_level(level), level == log::Level::kWarn ? abi::NCCL_ALL : nccl_flags(subsystem), file, line, "%s",
           message);
}

// One name of NCCL_DEBUG_SUBSYS as NCCL's flag; 0 for a name not listed here (newer NCCLs add some).
unsigned long nccl_subsystem_flag(const char* name) {
  static const struct {
    const char* name;
    unsigned long flag;
  } kNames[] = {{"INIT", abi::NCCL_INIT},
                {"COLL", abi::NCCL_COLL},
                {"P2P", abi::NCCL_P2P},
                {"SHM", abi::NCCL_SHM},
                {"NET", abi::NCCL_NET},
                {"GRAPH", abi::NCCL_GRAPH},
                {"TUNING", abi::NCCL_TUNING},
                {"ENV", abi::NCCL_ENV},
                {"ALLOC", abi::NCCL_ALLOC},
                {"CALL", abi::NCCL_CALL},
                {"PROXY", abi::NCCL_PROXY},
                {"NVLS", abi::NCCL_NVLS},
                {"BOOTSTRAP", abi::NCCL_BOOTSTRAP},
                {"REG", abi::NCCL_REG},
                {"ALL", abi::NCCL_ALL}};
  for (const auto& n : kNames)
    if (!strcasecmp(name, n.name)) return n.flag;
  return 0;
}

}  // namespace

unsigned long nccl_flags(log::Subsystem subsystem) {
  switch (subsystem) {
    case log::Subsystem::kInit: return abi::NCCL_INIT | abi::NCCL_NET;
    case log::Subsystem::kNet: return abi::NCCL_NET;
    case log::Subsystem::kColl: return abi::NCCL_COLL;
    case log::Subsystem::kEnv: return abi::NCCL_ENV;
  }
  return abi::NCCL_NET;
}

// VERSION and WARN print warnings only.
log::Level sieve_level(const char* nccl_debug) {
  if (!nccl_debug) return log::Level::kTrace;
  if (!strcasecmp(nccl_debug, "VERSION") || !strcasecmp(nccl_debug, "WARN")) return log::Level::kWarn;
  if (!strcasecmp(nccl_debug, "INFO") || !strcasecmp(nccl_debug, "ABORT")) return log::Level::kInfo;
  return log::Level::kTrace;
}

uint32_t sieve_subsystems(const char* nccl_debug_subsys) {
  constexpr log::Subsystem kAll[] = {log::Subsystem::kInit, log::Subsystem::kNet, log::Subsystem::kColl,
                                     log::Subsystem::kEnv};
  // NCCL's default: INIT, BOOTSTRAP, ENV.
  unsigned long nccl_mask = abi::NCCL_INIT | abi::NCCL_BOOTSTRAP | abi::NCCL_ENV;
  if (nccl_debug_subsys) {
    std::string list = nccl_debug_subsys;
    const bool invert = !list.empty() && list[0] == '^';
    if (invert) list.erase(0, 1);
    nccl_mask = 0;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = list.find(',', start);
      const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const unsigned long bit = nccl_subsystem_flag(name.c_str());
      if (bit == 0) return log::kAllSubsystems;  // a name Sieve does not know: let NCCL decide
      nccl_mask |= bit;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (invert) nccl_mask = ~nccl_mask;
  }
  uint32_t mask = 0;
  for (log::Subsystem s : kAll)
    if (nccl_flags(s) & nccl_mask) mask |= static_cast<uint32_t>(s);
  return mask;
}

void install_nccl_logger(abi::ncclDebugLogger_t logger) {
  g_logger.store(logger);
  const char* nccl_debug = std::getenv("NCCL_DEBUG");
  if (!logger) log::set_sink(nullptr);
  else if (!nccl_debug) log::set_sink(forward);  // the logger's own rule, unknown here, decides
  else log::set_sink(forward, sieve_level(nccl_debug), sieve_subsystems(std::getenv("NCCL_DEBUG_SUBSYS")));
}

}  // namespace sieve::plugin
