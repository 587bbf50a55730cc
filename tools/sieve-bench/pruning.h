// SPDX-License-Identifier: Apache-2.0
// Which gradient elements a pruned model still has. Every node computes the same masks from the
// same seed (the RNG is ours, not the standard library's, so every build agrees), just as every
// rank of a real job holds the same pruning masks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/sieve-bench/buckets.h"
#include "tools/sieve-bench/models.h"

namespace sieve::bench {

enum class PruneKind {
  None,          // dense model: every element kept
  Unstructured,  // each prunable weight keeps exactly round(density * size) elements, chosen at random
  Channel,       // each prunable weight keeps round(density * out) whole output filters / rows
};

struct PruneSpec {
  PruneKind kind = PruneKind::None;
  double density = 1.0;  // fraction kept, in (0, 1]
  uint64_t seed = 1;
};

// One byte per element, 1 = kept, laid out like the bucket.
using BucketMask = std::vector<uint8_t>;

std::vector<BucketMask> prune(const Model& model, const std::vector<Bucket>& buckets, const PruneSpec& spec);
// The same masks per parameter (one byte per element, in the parameter's own layout): what FSDP's
// sharding cuts up. Parameter i's mask equals its span in prune()'s buckets.
std::vector<std::vector<uint8_t>> prune_parameters(const Model& model, const PruneSpec& spec);

// Fraction of elements kept over all buckets.
double kept_fraction(const std::vector<BucketMask>& masks);

// Small deterministic generator (splitmix64): same sequence on every node and every build.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t state_;
};

// Selection sampling (Knuth's algorithm S): marks exactly `keep` of `n` positions, in one pass.
void select_exactly(SplitMix64& rng, size_t n, size_t keep, uint8_t* out, size_t stride_elems);

}  // namespace sieve::bench
