// SPDX-License-Identifier: Apache-2.0
// What the GPU kit's programs share on their command line: how they end on an error (one line
// naming the program and the rank, exit status 1) and how they read a size ("4096", "256K", "1M",
// "1G"), so every program reports and refuses a bad value alike; and how they print a record, one
// JSON object a line through the tools' JSON writer. Header-only: each program is one file, linked
// only with CUDA, NCCL and the static JSON writer (tools/common).
#pragma once

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/common/json_writer.h"

namespace sieve::tools::gpu {

struct FailContext {
  const char* program = "sieve-gpu";
  const int* rank = nullptr;  // the program's rank variable, read when it fails
};
inline FailContext& fail_context() {
  static FailContext context;
  return context;
}
// Names the program and the variable holding its rank in every failure line; call first in main.
inline void set_fail_context(const char* program, const int* rank) { fail_context() = {program, rank}; }

// "<program> rank <r>: FAIL: <message>" on stderr, then exit(1).
[[noreturn]] inline __attribute__((format(printf, 1, 2))) void fail(const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  const FailContext& c = fail_context();
  std::fprintf(stderr, "%s rank %d: FAIL: %s\n", c.program, c.rank ? *c.rank : 0, text);
  std::exit(1);
}

// A positive decimal number with an optional K, M or G (powers of 1024, either case). False for 0, a
// sign, anything after the suffix, and a value that overflows size_t.
inline bool parse_size(const std::string& text, size_t* out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || value == 0) return false;
  unsigned shift = 0;
  if (*end != '\0') {
    switch (*end) {
      case 'K':
      case 'k': shift = 10; break;
      case 'M':
      case 'm': shift = 20; break;
      case 'G':
      case 'g': shift = 30; break;
      default: return false;
    }
    if (end[1] != '\0') return false;
  }
  if (value > (static_cast<unsigned long long>(SIZE_MAX) >> shift)) return false;
  *out = static_cast<size_t>(value) << shift;
  return true;
}

// parse_size for a command-line option, failing with the option's name on bad text.
inline size_t size_option(const std::string& option, const std::string& text) {
  size_t value = 0;
  if (!parse_size(text, &value))
    fail("%s: bad size '%s' (a positive number, optionally with K, M or G)", option.c_str(), text.c_str());
  return value;
}

// One record on stdout, flushed at once: the GPU kit reads the log of a rank that may be killed next.
template <typename Members> void print_json_line(Members&& write_members) {
  std::fputs(json_line(write_members).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace sieve::tools::gpu
