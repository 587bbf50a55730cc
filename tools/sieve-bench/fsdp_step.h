// SPDX-License-Identifier: Apache-2.0
// One node's share of an FSDP training step's traffic (sieve-bench --fsdp): the all-gather of every
// group's parameters in forward order, then the reduce-scatter of every group's gradients in
// backward order, each a ring collective over the group's rank-major buffer (fsdp_layout.h).
//
//   dense      the unpruned model: whole buffers;
//   compacted  the pruned model as the collective proxy runs it: each shard's kept elements
//              gathered into a slot of K (the largest shard's kept count), the ring run over
//              N x K elements, the result scattered back with exact zeros; groups the proxy's
//              rules leave dense run whole;
//   codec      the pruned model's zero-filled whole buffers (the transport elides the zeros).
//
// The values are exact in any order (gradients.h), so every all-gathered element and every
// element of the rank's reduce-scattered shard is compared bit for bit with what it must be.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compress/tile_layout.h"
#include "tools/sieve-bench/arena.h"
#include "tools/sieve-bench/dtype.h"
#include "tools/sieve-bench/fsdp_layout.h"
#include "tools/sieve-bench/options.h"
#include "tools/sieve-bench/ring_allreduce.h"

namespace sieve::bench {

// What every node of an --fsdp run shares, built once before the nodes start.
struct FsdpWorkload {
  int nranks = 0;
  std::vector<FsdpGroup> groups;
  std::vector<std::vector<uint8_t>> unpruned;  // per group: every parameter element 1, padding 0
  std::vector<std::vector<uint8_t>> pruned;    // per group: the pruned model's buffer mask
  std::vector<ShardCompaction> compaction;     // per group: how the proxy runs `pruned`'s collectives
  size_t buffer_elements() const;              // all groups, padding included
  size_t kept_elements() const;                // all groups, of `pruned`
  size_t compacted_elements() const;           // what the compacted mode's rings carry, all groups
  size_t groups_compacted() const;
};

// `keep`: one mask per parameter of `model` (pruning.h's prune_parameters, or a --masks file).
FsdpWorkload make_fsdp_workload(const Model& model, int nranks, const std::vector<std::vector<uint8_t>>& keep,
                                const ProxyRules& rules = {});

struct FsdpStepResult {
  std::string error;                       // "" on success; names the group and the collective otherwise
  size_t bytes_sent = 0;                   // logical bytes this node handed the transport
  std::chrono::nanoseconds compaction{0};  // of which gathers and scatters (the proxy's kernels)
};

class FsdpStep {
 public:
  FsdpStep(const FsdpWorkload& work, Mode mode, int rank, DType type);

  // "" or what could not be allocated.
  std::string allocate();
  // The memory the rings send from and receive into: to register with the transport.
  std::vector<std::pair<void*, size_t>> ring_regions() const;

  // Untimed: this rank's parameter shards and its gradients for `iteration`, and a NaN wherever
  // the all-gather must write, so an element it missed cannot pass for a right one.
  void fill(uint64_t iteration);
  // Timed: the step's collectives. `scratch` holds scratch_bytes(options).
  FsdpStepResult run(RingLink& link, void* scratch, const RingOptions& options);
  // Untimed: "" or the first group whose all-gathered parameters or reduce-scattered gradient
  // shard differ from what they must be (zero wherever the mode's mask is 0).
  std::string check(uint64_t iteration) const;

  // After run(): group g's all-gathered parameters (its whole buffer) and this rank's
  // reduce-scattered gradient shard.
  const void* parameters(size_t group) const { return params_at(group); }
  const void* gradient_shard(size_t group) const {
    return grads_at(group) + work_.groups[group].shard_elements * static_cast<size_t>(rank_) * elem_;
  }

 private:
  const std::vector<uint8_t>& mask_of(size_t group) const;
  bool compacts(size_t group) const;
  void gather(size_t group, int shard, const char* buffer);
  void scatter(size_t group, int shard, char* buffer) const;
  char* params_at(size_t group) const;
  char* grads_at(size_t group) const;

  const FsdpWorkload& work_;
  Mode mode_;
  int rank_;
  int nranks_;
  DType type_;
  size_t elem_;
  std::vector<size_t> first_;          // per group: its buffer's first element, over all groups
  std::vector<size_t> compact_first_;  // per group: its N x K slots in compact_ (compacted groups)
  // Each compacting group's mask as the proxy's kernels read it (compress/tile_layout.h), built once;
  // a shard is elements [shard * s, shard * (s + 1)) of it, moved by compress/compact_host.h.
  std::vector<sieve::compress::TileLayout> layouts_;
  std::unique_ptr<Arena> params_, grads_, compact_;
};

}  // namespace sieve::bench
