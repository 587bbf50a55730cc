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
    case config::LogLevel::None: return log::Level::None;
    case config::LogLevel::Warn: return log::Level::Warn;
    case config::LogLevel::Info: return log::Level::Info;
    case config::LogLevel::Trace: return log::Level::Trace;
  }
  return log::Level::Warn;
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
