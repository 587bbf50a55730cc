// The real NCCL entry points behind the interposed ones, found lazily with dlsym(RTLD_NEXT) (the
// library that comes after this one in the lookup order: libnccl when LD_PRELOADed), or in an
// already-loaded libnccl.so.2. The proxy and its backend call only these, so their own collectives
// (the hash check, the compact all-reduce) never come back into the interposer.
#pragma once

#include <nccl.h>

namespace sieve::plugin::proxy {

struct RealNccl {
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  bool complete() const { return all_reduce && group_start && group_end; }
};

// Resolved on first use and retried until found; members are null (a warning was logged once)
// while NCCL is not loaded.
const RealNccl& real_nccl();

}  // namespace sieve::plugin::proxy
