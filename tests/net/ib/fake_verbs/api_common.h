// SPDX-License-Identifier: Apache-2.0
// What the exported entry points (device_api.cc, verbs_api.cc, test_hooks.cc) share: how a call is
// refused as real libibverbs refuses it, how an object handed in is checked, and the process-wide
// state rdma-core itself keeps (handles, fork safety).
#pragma once

#include <atomic>
#include <cstdint>

#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/violation.h"

#define FAKE_VERBS_API extern "C" __attribute__((visibility("default")))

namespace sieve::fake_verbs {

// A call real libibverbs would reject: the caller sets errno; this prints a line saying why.
void refuse(const char* format, ...) __attribute__((format(printf, 1, 2)));

inline Engine* owner(const Context* context) { return context->engine; }
template <typename T> Engine* owner(const T* object) { return object->context->engine; }

// Whether an object handed in may be used: not NULL, of this process, not destroyed (else a VIOLATION).
template <typename T> bool usable(T* object, const char* what) {
  if (object == nullptr) {
    violation("%s is NULL", what);
    return false;
  }
  if (!owned_here(owner(object), what)) return false;
  if (object->destroyed) {
    violation("use of destroyed %s", what);
    return false;
  }
  return true;
}

inline Engine& engine_of(Context* context) { return *context->engine; }

// A new object handle (ibv_pd::handle and friends). Under the engine lock.
uint32_t next_handle();

// ibv_fork_init as rdma-core keeps it: it must come before the first registration, or it fails;
// once it succeeded, registered pages are marked "don't fork".
extern std::atomic<bool> g_fork_initialized;
extern std::atomic<bool> g_registered_any;

}  // namespace sieve::fake_verbs
