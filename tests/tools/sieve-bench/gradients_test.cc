// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tools/sieve-bench/gradients.h"

namespace sieve::bench {
namespace {

// Adds the nodes' contributions in a scrambled order and expects the exact expected sum.
void expect_exact_in_any_order(DType type, int nranks) {
  const size_t count = 4096;
  const GradientPattern pattern(nranks, 3, type);
  std::vector<std::vector<char>> parts(nranks, std::vector<char>(count * dtype_size(type)));
  for (int r = 0; r < nranks; ++r) fill_gradients(pattern, r, 1000, count, type, nullptr, parts[r].data());
  std::vector<char> sum(parts[nranks - 1]);
  for (int r = nranks - 2; r >= 0; --r) sum_into(type, sum.data(), parts[r].data(), count);
  EXPECT_EQ(check_sums(pattern, 1000, count, type, nullptr, sum.data()), "");
}

TEST(Gradients, SumsAreExactInFp32AndBf16) {
  for (int nranks : {2, 4, 7, 16}) {
    expect_exact_in_any_order(DType::kF32, nranks);
    expect_exact_in_any_order(DType::kBF16, nranks);
  }
}

// Real fp32 gradients fill the mantissa; so must these, or the wire codec's 2-byte words would
// elide the zero low halves and flatter its wire bytes.
TEST(Gradients, Fp32ValuesUseTheLowMantissaBytes) {
  const GradientPattern pattern(4, 7, DType::kF32);
  const size_t count = 10000;
  size_t low_half_zero = 0;
  for (size_t i = 0; i < count; ++i) {
    const float v = pattern.value(1, i);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    ASSERT_NE(v, 0.0f);
    if ((bits & 0xffffu) == 0) ++low_half_zero;
  }
  EXPECT_LT(low_half_zero, count / 100);
}

TEST(Gradients, MaskedPositionsAreZeroAndAnyDifferenceIsCaught) {
  const GradientPattern pattern(4, 0, DType::kF32);
  std::vector<uint8_t> keep = {1, 0, 1, 0};
  std::vector<float> data(4);
  fill_gradients(pattern, 2, 0, 4, DType::kF32, keep.data(), data.data());
  EXPECT_EQ(data[1], 0.0f);
  EXPECT_NE(data[0], 0.0f);
  for (size_t i = 0; i < 4; ++i) data[i] = keep[i] ? pattern.expected_sum(i) : 0.0f;
  EXPECT_EQ(check_sums(pattern, 0, 4, DType::kF32, keep.data(), data.data()), "");
  data[3] = pattern.value(2, 3);
  EXPECT_NE(check_sums(pattern, 0, 4, DType::kF32, keep.data(), data.data()), "");
  data[3] = -0.0f;  // a masked position must come back as +0.0
  EXPECT_NE(check_sums(pattern, 0, 4, DType::kF32, keep.data(), data.data()), "");
}

}  // namespace
}  // namespace sieve::bench
