// Gradient values whose sums are exact in fp32 and bf16 in any order: ±k * 2^-6 with 1 <= k <= K,
// K chosen so every partial sum over the nodes stays within 255 (bf16 holds integers to 256
// exactly). The expected result is recomputed independently from the same formula, so any lost,
// duplicated, misplaced or corrupted byte shows up as a difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/bench/dtype.h"

namespace sieve::bench {

class GradientPattern {
 public:
  GradientPattern(int nranks, uint64_t iteration);
  // The value node `rank` contributes at global element `index`.
  float value(int rank, uint64_t index) const;
  // Sum of value() over all nodes.
  float expected_sum(uint64_t index) const;

 private:
  int nranks_;
  uint64_t iteration_;
  uint32_t magnitude_;
};

// Writes node `rank`'s values for elements [first, first + count) into `out` (of `type`); where
// `keep` is given and keep[i] == 0 the value is an exact zero (a pruned weight's gradient).
void fill_gradients(const GradientPattern& pattern, int rank, uint64_t first, size_t count, DType type,
                    const uint8_t* keep, void* out);

// Compares `data` with the expected sums (zero where keep[i] == 0). Returns "" or a description
// of the first mismatch and the number of mismatches.
std::string check_sums(const GradientPattern& pattern, uint64_t first, size_t count, DType type,
                       const uint8_t* keep, const void* data);

}  // namespace sieve::bench
