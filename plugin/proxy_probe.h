// SPDX-License-Identifier: Apache-2.0
// A hook between the two faces of the library: when NCCL initialises the net plugin, NCCL is
// loaded and the collective proxy (built only with CUDA) can check that it will see collectives.
// The proxy registers its check at load time; the net plugin runs it once. No dependency from the
// net plugin on the proxy.
#pragma once

#include <cstdint>

#include "plugin/sieve.h"

namespace sieve::plugin {

using ProxyProbe = void (*)();
void register_proxy_probe(ProxyProbe probe);
// Runs the registered probe once per process (later calls do nothing).
void run_proxy_probe();
// The C API's commit calls (sieve.h), served by the collective proxy where it is built in; without
// one registered they answer SIEVE_ERR_UNAVAILABLE. commit() returns 0, an NCCL result code, or
// kCommitUnreachable when no NCCL can be reached from this process.
constexpr int kCommitUnreachable = -1;
struct ProxyCommitApi {
  int (*commit)(void* comm, void* stream, uint32_t flags, sieve_commit_result_t* result);
  void (*arm)(const void* token, uint32_t flags);
  bool (*outcome)(const void* token, sieve_commit_result_t* result);  // false: no such commit seen
};
void register_proxy_commit_api(const ProxyCommitApi* api);
const ProxyCommitApi* proxy_commit_api();

// True when this library was loaded through LD_PRELOAD (its path, or its file name, is listed there).
bool preloaded();

}  // namespace sieve::plugin
