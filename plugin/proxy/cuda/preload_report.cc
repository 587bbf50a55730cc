// SPDX-License-Identifier: Apache-2.0
// The one line a preloaded proxy says when NCCL was loaded but never used: a job on a machine without
// a GPU (PyTorch refuses init_process_group("nccl") before any NCCL call), or a launcher that imports
// torch. It names the NCCL the proxy would have interposed and its version, so a user sees that the
// preload itself works. Said at exit, at INFO (SIEVE_LOG_LEVEL=info): torchrun's launcher loads NCCL
// the same way in every job, and a warning there would be noise.
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

#include <atomic>
#include <string>

#include "net/log.h"
#include "plugin/process_log.h"
#include "plugin/proxy/cuda/real_nccl.h"
#include "plugin/proxy_probe.h"

namespace sieve::plugin::proxy {
namespace {

std::atomic<bool> g_nccl_in_use{false};

// The first loaded object named libnccl.so*, and its ncclGetVersion; self-contained (no static that
// exit may already have destroyed).
std::string loaded_libnccl(decltype(&::ncclGetVersion)* get_version) {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libnccl.so") == std::string::npos) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &found);
  if (found.empty()) return found;
  if (void* handle = dlopen(found.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    *get_version = reinterpret_cast<decltype(&::ncclGetVersion)>(dlsym(handle, "ncclGetVersion"));
    dlclose(handle);  // RTLD_NOLOAD took a reference; the object stays loaded by its owner
  }
  return found;
}

void report_unused_nccl() {
  if (g_nccl_in_use.load(std::memory_order_relaxed)) return;
  decltype(&::ncclGetVersion) get_version = nullptr;
  const std::string nccl = loaded_libnccl(&get_version);
  if (nccl.empty()) return;  // a process of the job that never loads NCCL (a shell, a data loader): silent
  start_process_log();
  SIEVE_INFO(
      "collective proxy: preloaded; this process loaded NCCL %s (%s) but made no NCCL call, so nothing "
      "was interposed (no GPU here, or no communicator was created)",
      nccl_version_text(get_version).c_str(), nccl.c_str());
}

__attribute__((constructor)) void register_report() {
  if (preloaded()) atexit(&report_unused_nccl);
}

}  // namespace

void note_nccl_in_use() { g_nccl_in_use.store(true, std::memory_order_relaxed); }

}  // namespace sieve::plugin::proxy
