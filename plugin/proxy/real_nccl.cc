#include "plugin/proxy/real_nccl.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "net/log.h"

namespace sieve::plugin::proxy {
namespace {

// True when p lies in this library: a lookup that found our own interposer would recurse forever.
// Compared by object, not by address of our definition: with libnccl earlier in the global scope,
// even this library's own references to ncclAllReduce bind to libnccl's.
bool in_this_library(const void* p) {
  Dl_info mine{}, theirs{};
  if (!dladdr(reinterpret_cast<const void*>(&in_this_library), &mine) || !dladdr(p, &theirs)) return false;
  return mine.dli_fbase == theirs.dli_fbase;
}

void* resolve(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p && !in_this_library(p)) return p;
  for (const char* soname : {"libnccl.so.2", "libnccl.so"}) {
    void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    p = dlsym(handle, name);
    dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
    if (p && !in_this_library(p)) return p;
  }
  return nullptr;
}

}  // namespace

const RealNccl& real_nccl() {
  // Resolved until found, then fixed: a call that comes before libnccl is loaded must not make every
  // later call fail. Readers after success take no lock.
  static RealNccl real;
  static std::atomic<bool> found{false};
  static std::mutex mutex;
  static bool warned = false;
  if (found.load(std::memory_order_acquire)) return real;
  std::lock_guard lock(mutex);
  if (found.load(std::memory_order_relaxed)) return real;
  real.all_reduce = reinterpret_cast<decltype(real.all_reduce)>(resolve("ncclAllReduce"));
  real.group_start = reinterpret_cast<decltype(real.group_start)>(resolve("ncclGroupStart"));
  real.group_end = reinterpret_cast<decltype(real.group_end)>(resolve("ncclGroupEnd"));
  if (real.complete()) {
    found.store(true, std::memory_order_release);
  } else if (!warned) {
    warned = true;
    SIEVE_WARN("collective proxy: the real ncclAllReduce/ncclGroupStart/ncclGroupEnd were not found (is libnccl "
               "loaded, and dynamically linked?); interposed NCCL calls fail with ncclSystemError");
  }
  return real;
}

}  // namespace sieve::plugin::proxy
