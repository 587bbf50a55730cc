#include "net/log.h"

#include <atomic>
#include <cstdio>

namespace sieve::log {

namespace {
std::atomic<Sink> g_sink{nullptr};
std::atomic<Level> g_stderr_level{Level::Warn};

const char* level_name(Level level) {
  switch (level) {
    case Level::Warn: return "WARN";
    case Level::Info: return "INFO";
    case Level::Trace: return "TRACE";
    default: return "";
  }
}
}  // namespace

void set_sink(Sink sink) { g_sink.store(sink); }
void set_stderr_level(Level level) { g_stderr_level.store(level); }

void vwrite(Level level, const char* file, int line, const char* fmt, va_list args) {
  Sink sink = g_sink.load();
  if (!sink && (level == Level::None || level > g_stderr_level.load())) return;
  char body[1024];
  std::vsnprintf(body, sizeof(body), fmt, args);
  char message[1100];
  std::snprintf(message, sizeof(message), "%s %s", kPrefix, body);
  if (sink) {
    sink(level, file, line, message);
  } else {
    std::fprintf(stderr, "%s %s\n", level_name(level), message);
  }
}

void write(Level level, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vwrite(level, file, line, fmt, args);
  va_end(args);
}

}  // namespace sieve::log
