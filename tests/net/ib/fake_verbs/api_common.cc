// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/api_common.h"

#include <cstdarg>
#include <cstdio>

namespace sieve::fake_verbs {

namespace {
uint32_t g_handles = 0;  // under the engine lock
}  // namespace

std::atomic<bool> g_fork_initialized{false};
std::atomic<bool> g_registered_any{false};

void refuse(const char* format, ...) {
  char what[400];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof(what), format, args);
  va_end(args);
  std::fprintf(stderr, "fake-verbs: %s\n", what);
}

uint32_t next_handle() { return ++g_handles; }

Context* context_of(ibv_context* verbs) {
  if (verbs == nullptr) return nullptr;
  auto* extended =
      reinterpret_cast<verbs_context*>(reinterpret_cast<uint8_t*>(verbs) - offsetof(verbs_context, context));
  return reinterpret_cast<ContextShell*>(extended)->impl;
}

}  // namespace sieve::fake_verbs
