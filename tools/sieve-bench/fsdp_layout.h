// SPDX-License-Identifier: Apache-2.0
// A model as FSDP2 (fully_shard) moves it: parameter groups, one per wrapped module, and for each
// group the buffer its all-gather of parameters and reduce-scatter of gradients carry, sharded over
// the ranks; plus how Sieve's collective proxy compacts those collectives for a pruned model.
//
// Groups: `fully_shard(block)` for every block of the model, then `fully_shard(model)` for what is
// left (the root), as FSDP2's examples wrap a ResNet or a transformer. A block is found by name
// (fsdp_unit_of): so the rule works for --masks files too, where names are all there is.
//
// Layout (FSDP2's): each parameter is cut on dim 0 as torch.chunk cuts it, c = ceil(rows / N) rows
// per rank (the last ranks may get fewer, or none), and each rank's piece is zero-padded to c rows.
// A rank's shard is its pieces of the group's parameters in registration order; the group's buffer
// is the N shards rank-major, N x S elements. That is the all-gather's output and the
// reduce-scatter's input; rank r's shard is the all-gather's input and the reduce-scatter's output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/sieve-bench/models.h"

namespace sieve::bench {

// One parameter's piece of every rank's shard.
struct ShardedParam {
  size_t param = 0;         // index into Model::params
  size_t rows = 0;          // dim 0 (1 for a parameter without dimensions)
  size_t row_elements = 0;  // elements per row
  size_t chunk_rows = 0;    // c = ceil(rows / N): every rank's piece, padding included
  size_t offset = 0;        // where the piece starts inside each rank's shard
  size_t piece_elements() const { return chunk_rows * row_elements; }
  // Real (unpadded) rows of rank r's piece: rows [r c, min((r + 1) c, rows)).
  size_t real_rows(int rank) const;
};

struct FsdpGroup {
  std::string name;                  // the wrapped module ("layer1.0"); "" for the root
  std::vector<ShardedParam> params;  // registration order
  size_t shard_elements = 0;         // S: one rank's shard, padding included
  size_t buffer_elements(int nranks) const { return shard_elements * static_cast<size_t>(nranks); }
};

// The module fully_shard wraps around a parameter: its name up to and including the first module
// component that numbers an entry of a module list — all digits ("layer1.0", "features.12",
// "model.layers.7") or ending in "_<digits>" (torchvision's "encoder.layers.encoder_layer_7") —
// or "" (the root) when no component does. The last component names the tensor, never a module.
std::string fsdp_unit_of(const std::string& parameter_name);

// The model's groups: the root first (its all-gather opens the forward pass, its reduce-scatter
// closes the backward one), then the blocks in registration order; a group with no parameters is
// left out.
std::vector<FsdpGroup> fsdp_groups(const Model& model, int nranks);

// The group's buffer as a mask, rank-major: 1 where a parameter's element is kept, 0 where it is
// pruned and wherever FSDP padded. `keep` holds one mask per parameter of the model (its own
// layout, one byte per element); null keeps every element (only the padding is 0).
std::vector<uint8_t> fsdp_buffer_mask(const FsdpGroup& group, int nranks,
                                      const std::vector<std::vector<uint8_t>>* keep);

// The proxy's thresholds (SIEVE_PROXY_MIN_COUNT, SIEVE_PROXY_MAX_DENSITY) at their defaults: below
// them it runs a collective dense (plugin/proxy/entry_plan.h, PlanRules).
struct ProxyRules {
  uint64_t min_count = 16384;
  double max_density = 0.9;
};

// How the proxy runs a reduce-scatter or all-gather of a buffer with this mask over N ranks: every
// shard compacted on its own and padded to the largest shard's kept count K, so the ring moves
// N x K elements instead of N x S — when that is worth it by the rules; otherwise dense.
struct ShardCompaction {
  std::vector<size_t> kept;  // per shard
  size_t width = 0;          // K
  bool compacts = false;
  size_t moved_elements(size_t buffer_elements) const { return compacts ? width * kept.size() : buffer_elements; }
};
ShardCompaction shard_compaction(const std::vector<uint8_t>& buffer_mask, int nranks, const ProxyRules& rules = {});

}  // namespace sieve::bench
