// SPDX-License-Identifier: Apache-2.0
// The real NCCL entry points behind the interposed ones. Looked up lazily: first with
// dlsym(RTLD_NEXT) (the object after this one in the lookup order: libnccl when LD_PRELOADed), then
// in every other loaded object (dl_iterate_phdr), libnccl* first. The proxy and its backend call
// only these, so their own collectives (votes, compact collectives) never come back into the
// interposer.
#pragma once

#include <nccl.h>

#include <string>

namespace sieve::plugin::proxy {

struct RealNccl {
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGroupSimulateEnd) group_simulate_end = nullptr;  // NCCL >= 2.22
  decltype(&::ncclCommCount) comm_count = nullptr;
  decltype(&::ncclCommUserRank) comm_user_rank = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommFinalize) comm_finalize = nullptr;
  decltype(&::ncclRedOpCreatePreMulSum) red_op_create_pre_mul_sum = nullptr;
  decltype(&::ncclRedOpDestroy) red_op_destroy = nullptr;
  decltype(&::ncclGetVersion) get_version = nullptr;  // for the log: which NCCL the proxy interposes
  decltype(&::ncclCommRevoke) comm_revoke = nullptr;  // NCCL >= 2.28.7: the proxy's abort keeps the handle
  // Communicator creation: a new handle may reuse a dead one's address, so the proxy forgets it.
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommInitAll) comm_init_all = nullptr;
  decltype(&::ncclCommInitRankScalable) comm_init_rank_scalable = nullptr;
  decltype(&::ncclCommSplit) comm_split = nullptr;
  decltype(&::ncclCommShrink) comm_shrink = nullptr;
  std::string found_in;  // the object they came from
  // Everything the proxy cannot work without.
  bool complete() const;
};

// Resolved on first use and retried until found (a call may come before libnccl is loaded); then
// fixed. While not found, the members the proxy needs are null and one warning said why.
const RealNccl& real_nccl();
// Why the real NCCL cannot be reached ("" when it can), naming the cause: no libnccl loaded, or a
// PyTorch that links NCCL statically (its calls never reach an LD_PRELOADed library).
std::string real_nccl_problem();
// NCCL's version code (ncclGetVersion) as "2.28.9", or "unknown".
std::string nccl_version_text(decltype(&::ncclGetVersion) get_version);

// The process made an interposed NCCL call, or NCCL initialised the net plugin (preload_report.cc).
void note_nccl_in_use();

}  // namespace sieve::plugin::proxy
