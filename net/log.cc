// SPDX-License-Identifier: Apache-2.0
#include "net/log.h"

#include <cstdio>

namespace sieve::log {

namespace detail {
std::atomic<uint32_t> g_max_level{static_cast<uint32_t>(Level::kWarn)};
std::atomic<uint32_t> g_subsystems{kAllSubsystems};
}  // namespace detail

namespace {
std::atomic<Sink> g_sink{nullptr};
std::atomic<Level> g_stderr_level{Level::kWarn};

const char* level_name(Level level) {
  switch (level) {
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
    default: return "";
  }
}

void set_filter(Level max_level, uint32_t subsystems) {
  detail::g_max_level.store(static_cast<uint32_t>(max_level), std::memory_order_relaxed);
  detail::g_subsystems.store(subsystems, std::memory_order_relaxed);
}
}  // namespace

void set_sink(Sink sink, Level max_level, uint32_t subsystems) {
  g_sink.store(sink);
  // A sink takes every warning (see enabled()); without one, stderr's threshold rules.
  if (sink) set_filter(max_level < Level::kWarn ? Level::kWarn : max_level, subsystems);
  else set_filter(g_stderr_level.load(), kAllSubsystems);
}

void set_stderr_level(Level level) {
  g_stderr_level.store(level);
  if (!g_sink.load()) set_filter(level, kAllSubsystems);
}

void vwrite(Level level, Subsystem subsystem, const char* file, int line, const char* fmt, va_list args) {
  Sink sink = g_sink.load();
  if (!sink && (level == Level::kNone || level > g_stderr_level.load())) return;
  char body[1024];
  std::vsnprintf(body, sizeof(body), fmt, args);
  char message[1100];
  std::snprintf(message, sizeof(message), "%s %s", kPrefix, body);
  if (sink) {
    sink(level, subsystem, file, line, message);
  } else {
    std::fprintf(stderr, "%s %s\n", level_name(level), message);
  }
}

void write(Level level, Subsystem subsystem, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vwrite(level, subsystem, file, line, fmt, args);
  va_end(args);
}

}  // namespace sieve::log
