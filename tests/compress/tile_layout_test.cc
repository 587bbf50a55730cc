// SPDX-License-Identifier: Apache-2.0
#include "compress/tile_layout.h"

#include <gtest/gtest.h>

#include <random>

namespace sieve::compress {
namespace {

Mask random_mask(uint64_t count, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Mask m(count, false);
  for (uint64_t i = 0; i < count; ++i)
    if (double(rng() % 10000) < density * 10000) m.set_range(i, 1, true);
  return m;
}

TEST(TileLayout, BitsAndTileBasesDescribeAnyUnalignedSpan) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const uint64_t total = 1 + seed * 977 + (seed % 3) * kTileElements * 2;
    const Mask m = random_mask(total, 0.05 + 0.045 * double(seed), seed);
    std::mt19937_64 rng(seed);
    const uint64_t first = rng() % total, count = 1 + rng() % (total - first);
    const TileLayout l = build_tile_layout(m, first, count);
    ASSERT_EQ(l.count, count);
    ASSERT_EQ(l.bits.size(), (count + 31) / 32);
    uint64_t kept = 0;
    for (uint64_t i = 0; i < count; ++i) {
      const bool bit = (l.bits[i / 32] >> (i % 32)) & 1u;
      ASSERT_EQ(bit, m.test(first + i)) << "seed " << seed << " element " << i;
      if (i % kTileElements == 0) { ASSERT_EQ(l.tile_base[i / kTileElements], kept) << "tile " << i / kTileElements; }
      kept += bit;
    }
    for (uint64_t i = count; i < l.bits.size() * 32; ++i)
      ASSERT_FALSE((l.bits[i / 32] >> (i % 32)) & 1u) << "past the end";
    EXPECT_EQ(l.nnz, kept);
    EXPECT_EQ(l.tile_base.back(), kept);
    EXPECT_EQ(l.tile_base.size(), (count + kTileElements - 1) / kTileElements + 1);
  }
}

TEST(TileLayout, ReferenceGatherAndScatterRoundTripWithExactZeros) {
  const Mask m = random_mask(10000, 0.3, 7);
  const TileLayout l = build_tile_layout(m, 123, 9000);
  std::vector<double> src(9000), compact(l.nnz), back(9000, 42.0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = double(i) + 0.5;
  gather_reference(l, sizeof(double), src.data(), compact.data());
  uint64_t j = 0;
  for (uint64_t i = 0; i < 9000; ++i) {
    if (m.test(123 + i)) { ASSERT_EQ(compact[j++], src[i]); }
  }
  scatter_reference(l, sizeof(double), compact.data(), back.data());
  for (uint64_t i = 0; i < 9000; ++i) ASSERT_EQ(back[i], m.test(123 + i) ? src[i] : 0.0) << i;
}

}  // namespace
}  // namespace sieve::compress
