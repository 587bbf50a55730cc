// Sieve's log facade. Every line carries the fixed "NET/Sieve" prefix. Inside NCCL the plugin
// installs a sink that forwards to NCCL's logger (so NCCL_DEBUG governs it); elsewhere (tools,
// tests) lines at or above the threshold go to stderr. Lives at the bottom of the dependency graph
// that needs it (net/ and plugin/); compress/ and topology/ return messages instead of logging.
#pragma once

#include <cstdarg>

namespace sieve::log {

enum class Level { None = 0, Warn = 1, Info = 2, Trace = 3 };

// Receives one formatted line (prefix included). Must be thread-safe.
using Sink = void (*)(Level level, const char* file, int line, const char* message);

// Installs the sink (nullptr restores stderr). Process-wide on purpose: NCCL's logger is.
void set_sink(Sink sink);
// Threshold for the stderr sink; an installed sink receives everything and filters itself.
void set_stderr_level(Level level);

void write(Level level, const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
void vwrite(Level level, const char* file, int line, const char* fmt, va_list args);

constexpr const char* kPrefix = "NET/Sieve";

}  // namespace sieve::log

#define SIEVE_WARN(...) ::sieve::log::write(::sieve::log::Level::Warn, __FILE__, __LINE__, __VA_ARGS__)
#define SIEVE_INFO(...) ::sieve::log::write(::sieve::log::Level::Info, __FILE__, __LINE__, __VA_ARGS__)
#define SIEVE_TRACE(...) ::sieve::log::write(::sieve::log::Level::Trace, __FILE__, __LINE__, __VA_ARGS__)
