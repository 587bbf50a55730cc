// SPDX-License-Identifier: Apache-2.0
// Gradient values whose sums are exact in any order: ±k * 2^-s with 1 <= k <= K, K chosen so every
// partial sum over the nodes stays an integer the type holds exactly (2^24 for fp32, 256 for bf16).
// For fp32 K is large, so values fill the mantissa as real gradients do: a value whose low bytes
// were zero would let the wire codec elide half of every kept word, which real data never allows.
// The expected result is recomputed independently from the same formula, so any lost, duplicated,
// misplaced or corrupted byte shows up as a difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/sieve-bench/dtype.h"

namespace sieve::bench {

class GradientPattern {
 public:
  GradientPattern(int nranks, uint64_t iteration, DType type);
  // The value node `rank` contributes at global element `index`.
  float value(int rank, uint64_t index) const;
  // Sum of value() over all nodes.
  float expected_sum(uint64_t index) const;

 private:
  int nranks_;
  uint64_t iteration_;
  uint32_t magnitude_;
  float scale_;
};

// Writes node `rank`'s values for elements [first, first + count) into `out` (of `type`); where
// `keep` is given and keep[i] == 0 the value is an exact zero (a pruned weight's gradient).
void fill_gradients(const GradientPattern& pattern, int rank, uint64_t first, size_t count, DType type,
                    const uint8_t* keep, void* out);

// Compares `data` with the expected sums (zero where keep[i] == 0). Returns "" or a description
// of the first mismatch and the number of mismatches.
std::string check_sums(const GradientPattern& pattern, uint64_t first, size_t count, DType type, const uint8_t* keep,
                       const void* data);

// Compares `data` with node `owner`'s own values (zero where keep[i] == 0): what an all-gather
// delivers from the shard `owner` holds. Returns "" or a description as check_sums does.
std::string check_values(const GradientPattern& pattern, int owner, uint64_t first, size_t count, DType type,
                         const uint8_t* keep, const void* data);

}  // namespace sieve::bench
