// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/cuda/real_nccl.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "net/log.h"

namespace sieve::plugin::proxy {
namespace {

const void* this_library_base() {
  Dl_info mine{};
  return dladdr(reinterpret_cast<const void*>(&this_library_base), &mine) ? mine.dli_fbase : nullptr;
}

// True when p lies in this library: a lookup that found our own interposer would recurse forever.
// Compared by object, not by address of our definition: with libnccl earlier in the global scope,
// even this library's own references to ncclAllReduce bind to libnccl's.
bool in_this_library(const void* p) {
  Dl_info theirs{};
  return dladdr(p, &theirs) && theirs.dli_fbase == this_library_base();
}

std::vector<std::string> loaded_objects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && info->dlpi_name[0])
          static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
        return 0;
      },
      &names);
  // libnccl* first: a library that merely re-exports a few nccl* names must not win.
  std::stable_partition(names.begin(), names.end(),
                        [](const std::string& n) { return n.find("libnccl.so") != std::string::npos; });
  return names;
}

// The object defining `name` other than this library, or null.
void* find_symbol(const char* name, std::string* where) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p && !in_this_library(p)) {
    Dl_info info{};
    if (dladdr(p, &info) && info.dli_fname) *where = info.dli_fname;
    return p;
  }
  for (const std::string& object : loaded_objects()) {
    void* handle = dlopen(object.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    p = dlsym(handle, name);
    dlclose(handle);  // RTLD_NOLOAD took a reference; the object stays loaded by its owner
    if (p && !in_this_library(p)) {
      *where = object;
      return p;
    }
  }
  return nullptr;
}

template <typename F> void resolve(F* slot, const char* name, std::string* where) {
  std::string found;
  *slot = reinterpret_cast<F>(find_symbol(name, &found));
  if (*slot && where->empty()) *where = found;
}

}  // namespace

bool RealNccl::complete() const {
  return all_reduce && reduce_scatter && all_gather && group_start && group_end && comm_count && comm_user_rank &&
         comm_get_async_error && comm_abort && comm_destroy;
}

std::string real_nccl_problem() {
  if (real_nccl().complete()) return "";
  bool torch = false;
  for (const std::string& object : loaded_objects())
    if (object.find("libtorch_cuda") != std::string::npos) torch = true;
  if (torch)
    return "PyTorch's libtorch_cuda.so is loaded but no object exports ncclAllReduce: this PyTorch links NCCL "
           "statically, so its collectives never reach an LD_PRELOADed library (use a PyTorch built with a shared "
           "NCCL, e.g. the pip wheels with nvidia-nccl; the net plugin still works)";
  return "no loaded object exports ncclAllReduce/ncclGroupStart/ncclCommAbort (is libnccl.so.2 loaded, and linked "
         "dynamically?)";
}

std::string nccl_version_text(decltype(&::ncclGetVersion) get_version) {
  int code = 0;
  if (!get_version || get_version(&code) != ncclSuccess || code <= 0) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch; older ones major * 1000 + minor * 100 + patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

const RealNccl& real_nccl() {
  static RealNccl real;
  static std::atomic<bool> found{false};
  static std::mutex mutex;
  if (found.load(std::memory_order_acquire)) return real;
  std::lock_guard lock(mutex);
  if (found.load(std::memory_order_relaxed)) return real;
  std::string& where = real.found_in;
  where.clear();
  resolve(&real.all_reduce, "ncclAllReduce", &where);
  resolve(&real.reduce_scatter, "ncclReduceScatter", &where);
  resolve(&real.all_gather, "ncclAllGather", &where);
  resolve(&real.group_start, "ncclGroupStart", &where);
  resolve(&real.group_end, "ncclGroupEnd", &where);
  resolve(&real.group_simulate_end, "ncclGroupSimulateEnd", &where);
  resolve(&real.comm_count, "ncclCommCount", &where);
  resolve(&real.comm_user_rank, "ncclCommUserRank", &where);
  resolve(&real.comm_get_async_error, "ncclCommGetAsyncError", &where);
  resolve(&real.comm_abort, "ncclCommAbort", &where);
  resolve(&real.comm_destroy, "ncclCommDestroy", &where);
  resolve(&real.comm_finalize, "ncclCommFinalize", &where);
  resolve(&real.red_op_create_pre_mul_sum, "ncclRedOpCreatePreMulSum", &where);
  resolve(&real.red_op_destroy, "ncclRedOpDestroy", &where);
  resolve(&real.get_version, "ncclGetVersion", &where);
  resolve(&real.comm_revoke, "ncclCommRevoke", &where);
  resolve(&real.comm_init_rank, "ncclCommInitRank", &where);
  resolve(&real.comm_init_rank_config, "ncclCommInitRankConfig", &where);
  resolve(&real.comm_init_all, "ncclCommInitAll", &where);
  resolve(&real.comm_init_rank_scalable, "ncclCommInitRankScalable", &where);
  resolve(&real.comm_split, "ncclCommSplit", &where);
  resolve(&real.comm_shrink, "ncclCommShrink", &where);
  // Not found is not warned here: the callers say it once, with its likely cause
  // (real_nccl_problem(): the interposed call that fails, or the probe at the plugin's init).
  if (real.complete()) {
    found.store(true, std::memory_order_release);
    SIEVE_INFO("collective proxy: the real NCCL is %s (NCCL %s)", where.c_str(),
               nccl_version_text(real.get_version).c_str());
  }
  return real;
}

}  // namespace sieve::plugin::proxy
