// SPDX-License-Identifier: Apache-2.0
// Sieve's log facade. Every line carries the fixed "NET/Sieve" prefix and a subsystem. Inside NCCL
// the plugin installs a sink that forwards to NCCL's logger with the subsystem as NCCL's debug flags
// (so NCCL_DEBUG and NCCL_DEBUG_SUBSYS govern them); elsewhere (tools, tests) lines at or above the
// threshold go to stderr. Lives at the bottom of the dependency graph that needs it (net/ and
// plugin/); compress/ and topology/ return messages instead of logging.
//
// The macros test the level before they evaluate their arguments or format anything, so a line that
// will not print costs one load and compare.
//
// Each file logs under one subsystem, its target's or its own (SIEVE_LOG_SUBSYSTEM, set by CMake
// per target or per source file, Net when unset); SIEVE_LOG(level, subsystem, ...) names another.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>

namespace sieve::log {

enum class Level { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// What a line is about, in NCCL's terms (plugin/net/nccl_logger.cc maps each to NCCL's flags):
// Init = setting the plugin up (devices, the transport), Net = connections and data, Coll = the
// collective proxy, Env = configuration.
enum class Subsystem : uint32_t { kInit = 1u << 0, kNet = 1u << 1, kColl = 1u << 2, kEnv = 1u << 3 };
constexpr uint32_t kAllSubsystems = ~0u;

// Receives one formatted line (prefix included). Must be thread-safe.
using Sink = void (*)(Level level, Subsystem subsystem, const char* file, int line, const char* message);

// Installs the sink (nullptr restores stderr). Process-wide on purpose: NCCL's logger is. The sink
// receives every warning, and Info and Trace lines only up to `max_level` and in `subsystems` (a
// mask of Subsystem bits): what it would print, so nothing else is formatted.
void set_sink(Sink sink, Level max_level = Level::kTrace, uint32_t subsystems = kAllSubsystems);
// Threshold for the stderr sink.
void set_stderr_level(Level level);

namespace detail {
// The filter enabled() reads: the highest level that prints, and the subsystems whose lines do.
extern std::atomic<uint32_t> g_max_level;
extern std::atomic<uint32_t> g_subsystems;
}  // namespace detail

// Whether a line at `level` about `subsystem` would reach a reader. Warnings always do when a sink is
// installed (NCCL keeps the last one for ncclGetLastError whatever NCCL_DEBUG says).
inline bool enabled(Level level, Subsystem subsystem) {
  return level != Level::kNone && static_cast<uint32_t>(level) <= detail::g_max_level.load(std::memory_order_relaxed) &&
         (level == Level::kWarn ||
          (detail::g_subsystems.load(std::memory_order_relaxed) & static_cast<uint32_t>(subsystem)) != 0);
}

void write(Level level, Subsystem subsystem, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
void vwrite(Level level, Subsystem subsystem, const char* file, int line, const char* fmt, va_list args);

constexpr const char* kPrefix = "NET/Sieve";

}  // namespace sieve::log

#ifndef SIEVE_LOG_SUBSYSTEM
#define SIEVE_LOG_SUBSYSTEM Net
#endif

#define SIEVE_LOG(level, subsystem, ...)                                                                            \
  do {                                                                                                              \
    if (::sieve::log::enabled(::sieve::log::Level::k##level, ::sieve::log::Subsystem::k##subsystem))                \
      ::sieve::log::write(::sieve::log::Level::k##level, ::sieve::log::Subsystem::k##subsystem, __FILE__, __LINE__, \
                          __VA_ARGS__);                                                                             \
  } while (0)
#define SIEVE_LOG_AT_(level, subsystem, ...) SIEVE_LOG(level, subsystem, __VA_ARGS__)
#define SIEVE_WARN(...) SIEVE_LOG_AT_(Warn, SIEVE_LOG_SUBSYSTEM, __VA_ARGS__)
#define SIEVE_INFO(...) SIEVE_LOG_AT_(Info, SIEVE_LOG_SUBSYSTEM, __VA_ARGS__)
#define SIEVE_TRACE(...) SIEVE_LOG_AT_(Trace, SIEVE_LOG_SUBSYSTEM, __VA_ARGS__)
