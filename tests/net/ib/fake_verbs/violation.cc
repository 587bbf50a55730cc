// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/violation.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sieve::fake_verbs {
namespace {

std::atomic<uint64_t> g_violations{0};

// Read at every violation (not cached) so a test can switch modes between cases.
bool report_only() {
  const char* mode = std::getenv("FAKE_VERBS_VIOLATIONS");
  if (mode == nullptr || *mode == '\0' || std::strcmp(mode, "abort") == 0) return false;
  if (std::strcmp(mode, "report") == 0) return true;
  std::fprintf(stderr, "fake-verbs: FAKE_VERBS_VIOLATIONS='%s' is neither 'abort' nor 'report'; aborting\n", mode);
  return false;
}

}  // namespace

void violation(const char* format, ...) {
  char what[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof(what), format, args);
  va_end(args);
  g_violations.fetch_add(1);
  // One write call so lines from concurrent processes (two-node tests) do not interleave.
  char line[600];
  int n = std::snprintf(line, sizeof(line), "fake-verbs: VIOLATION: %s\n", what);
  if (n > 0) std::fwrite(line, 1, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1, stderr);
  std::fflush(stderr);
  if (!report_only()) std::abort();
}

uint64_t violation_count() { return g_violations.load(); }

}  // namespace sieve::fake_verbs
