#include <gtest/gtest.h>

#include <vector>

#include "tools/bench/gradients.h"

namespace sieve::bench {
namespace {

// Adds the nodes' contributions in a scrambled order and expects the exact expected sum.
void expect_exact_in_any_order(DType type, int nranks) {
  const size_t count = 4096;
  const GradientPattern pattern(nranks, 3);
  std::vector<std::vector<char>> parts(nranks, std::vector<char>(count * dtype_bytes(type)));
  for (int r = 0; r < nranks; ++r) fill_gradients(pattern, r, 1000, count, type, nullptr, parts[r].data());
  std::vector<char> sum(parts[nranks - 1]);
  for (int r = nranks - 2; r >= 0; --r) sum_into(type, sum.data(), parts[r].data(), count);
  EXPECT_EQ(check_sums(pattern, 1000, count, type, nullptr, sum.data()), "");
}

TEST(Gradients, SumsAreExactInFp32AndBf16) {
  for (int nranks : {2, 4, 7, 16}) {
    expect_exact_in_any_order(DType::F32, nranks);
    expect_exact_in_any_order(DType::BF16, nranks);
  }
}

TEST(Gradients, MaskedPositionsAreZeroAndAnyDifferenceIsCaught) {
  const GradientPattern pattern(4, 0);
  std::vector<uint8_t> keep = {1, 0, 1, 0};
  std::vector<float> data(4);
  fill_gradients(pattern, 2, 0, 4, DType::F32, keep.data(), data.data());
  EXPECT_EQ(data[1], 0.0f);
  EXPECT_NE(data[0], 0.0f);
  for (size_t i = 0; i < 4; ++i) data[i] = keep[i] ? pattern.expected_sum(i) : 0.0f;
  EXPECT_EQ(check_sums(pattern, 0, 4, DType::F32, keep.data(), data.data()), "");
  data[3] = 1.0f / 64;
  EXPECT_NE(check_sums(pattern, 0, 4, DType::F32, keep.data(), data.data()), "");
  data[3] = -0.0f;  // a masked position must come back as +0.0
  EXPECT_NE(check_sums(pattern, 0, 4, DType::F32, keep.data(), data.data()), "");
}

}  // namespace
}  // namespace sieve::bench
