// SPDX-License-Identifier: Apache-2.0
#include "plugin/process_log.h"

#include <mutex>
#include <string>

#include "net/log.h"
#include "plugin/config.h"
#include "plugin/mapped_copies.h"

namespace sieve::plugin {

namespace {

log::Level level_from(config::LogLevel level) {
  switch (level) {
    case config::LogLevel::kNone: return log::Level::kNone;
    case config::LogLevel::kWarn: return log::Level::kWarn;
    case config::LogLevel::kInfo: return log::Level::kInfo;
    case config::LogLevel::kTrace: return log::Level::kTrace;
  }
  return log::Level::kWarn;
}

}  // namespace

void start_process_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    const config::Registry& registry = config::Registry::process();
    log::set_stderr_level(level_from(registry.settings().log_level));
    for (const auto& problem : registry.diagnostics()) SIEVE_WARN("%s", problem.c_str());
    warn_about_other_copies();
  });
}

}  // namespace sieve::plugin
