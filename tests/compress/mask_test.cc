// SPDX-License-Identifier: Apache-2.0
#include "compress/mask.h"

#include <gtest/gtest.h>

#include <random>

namespace sieve::compress {
namespace {

Mask random_mask(uint64_t count, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution keep(density);
  std::vector<uint8_t> bytes(count);
  for (auto& b : bytes) b = keep(rng);
  return Mask::from_bytes(bytes.data(), count);
}

TEST(Mask, BuildersAgreeOnTheSameKeptSet) {
  const uint64_t n = 203;
  std::vector<uint8_t> bytes(n, 0), bits((n + 7) / 8, 0);
  std::vector<uint64_t> indices, starts, lengths;
  for (uint64_t i = 0; i < n; ++i) {
    if ((i / 10) % 2 == 0) {
      bytes[i] = uint8_t(1 + i % 7);  // any nonzero byte keeps
      bits[i / 8] |= uint8_t(1u << (i % 8));
      indices.push_back(i);
    }
  }
  for (uint64_t s = 0; s < n; s += 20) {
    starts.push_back(s);
    lengths.push_back(std::min<uint64_t>(10, n - s));
  }
  const Mask a = Mask::from_bytes(bytes.data(), n);
  const Mask b = Mask::from_bitmap(bits.data(), n);
  Mask c, d;
  ASSERT_TRUE(Mask::from_indices(n, indices.data(), indices.size(), &c).ok());
  ASSERT_TRUE(Mask::from_ranges(n, starts.data(), lengths.data(), starts.size(), &d).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a, d);
  EXPECT_EQ(a.kept(), indices.size());
  EXPECT_DOUBLE_EQ(a.density(), double(indices.size()) / n);
  EXPECT_EQ(a.hash(), d.hash());
}

TEST(Mask, BitmapPaddingBitsAreIgnored) {
  const uint8_t bits[2] = {0xFF, 0xFF};
  const Mask m = Mask::from_bitmap(bits, 11);
  EXPECT_EQ(m.kept(), 11u);
  EXPECT_EQ(m, Mask(11, true));
}

TEST(Mask, BadIndicesAndRangesAreRefusedWithAMessage) {
  Mask m;
  const uint64_t idx[] = {3, 10};
  Status s = Mask::from_indices(10, idx, 2, &m);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("past the end"), std::string::npos);
  const uint64_t starts[] = {0, 5}, lengths[] = {6, 2};
  s = Mask::from_ranges(10, starts, lengths, 2, &m);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos);
  const uint64_t far[] = {8}, len3[] = {3};
  EXPECT_EQ(Mask::from_ranges(10, far, len3, 1, &m).code(), Code::kOutOfRange);
  const uint64_t huge_start[] = {~uint64_t{0}}, one[] = {1};
  EXPECT_EQ(Mask::from_ranges(10, huge_start, one, 1, &m).code(), Code::kOutOfRange);
  EXPECT_EQ(Mask::from_ranges(10, nullptr, nullptr, 1, &m).code(), Code::kInvalidArgument);
  const uint64_t touching_starts[] = {5, 0}, touching_lengths[] = {5, 5};
  EXPECT_TRUE(Mask::from_ranges(10, touching_starts, touching_lengths, 2, &m).ok());
  EXPECT_EQ(m.kept(), 10u);
}

TEST(Mask, ConvFiltersAndInputChannelsFollowPytorchLayout) {
  const ConvShape shape{4, 3, 9};  // [4, 3, 3, 3]
  const uint8_t keep_filters[] = {1, 0, 0, 1};
  Mask m;
  ASSERT_TRUE(Mask::from_conv_filters(shape, keep_filters, &m).ok());
  EXPECT_EQ(m.count(), 108u);
  EXPECT_EQ(m.kept(), 54u);
  EXPECT_TRUE(m.test(0) && m.test(26) && !m.test(27) && !m.test(80) && m.test(81) && m.test(107));
  const uint8_t keep_inputs[] = {0, 1, 0};
  ASSERT_TRUE(Mask::from_conv_input_channels(shape, keep_inputs, &m).ok());
  EXPECT_EQ(m.kept(), 36u);
  for (uint64_t o = 0; o < 4; ++o)
    for (uint64_t i = 0; i < 3; ++i)
      for (uint64_t k = 0; k < 9; ++k) EXPECT_EQ(m.test((o * 3 + i) * 9 + k), i == 1);
  EXPECT_EQ(Mask::from_conv_filters({0, 3, 9}, keep_filters, &m).code(), Code::kInvalidArgument);
  EXPECT_EQ(Mask::from_conv_filters({~uint64_t{0}, 3, 9}, keep_filters, &m).code(), Code::kOutOfRange);
}

TEST(Mask, MergeOrIsTheUnion) {
  const Mask a = random_mask(1000, 0.2, 1), b = random_mask(1000, 0.3, 2);
  Mask u;
  ASSERT_TRUE(Mask::merge_or(a, b, &u).ok());
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(u.test(i), a.test(i) || b.test(i));
  EXPECT_EQ(Mask::merge_or(a, Mask(999), &u).code(), Code::kInvalidArgument);
}

// Pinned: changing the hash function breaks mixed-version jobs, so it must be a visible decision.
constexpr uint64_t kGoldenHash = 0x7fe4d977680de5f6ULL;

TEST(Mask, HashIsStableAndSeesEveryBit) {
  // A fixed value: the hash must not change between builds or hosts (ranks compare hashes).
  EXPECT_EQ(Mask(100, true).hash(), Mask(100, true).hash());
  EXPECT_NE(Mask(100, true).hash(), Mask(101, true).hash());
  EXPECT_NE(Mask(64, false).hash(), Mask(65, false).hash());
  const Mask base = random_mask(300, 0.5, 3);
  for (uint64_t i = 0; i < 300; i += 37) {
    Mask flipped = base;
    flipped.set_range(i, 1, !base.test(i));
    EXPECT_NE(flipped.hash(), base.hash()) << i;
  }
  const uint8_t bits[] = {0x0F, 0xF0};
  EXPECT_EQ(Mask::from_bitmap(bits, 16).hash(), kGoldenHash);
}

TEST(Mask, RunsAndLayoutPickTheSmallerDescription) {
  const uint64_t starts[] = {0, 100, 190}, lengths[] = {50, 30, 10};
  Mask ranged;
  ASSERT_TRUE(Mask::from_ranges(200, starts, lengths, 3, &ranged).ok());
  const auto runs = ranged.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0], (Range{0, 50}));
  EXPECT_EQ(runs[1], (Range{100, 30}));
  EXPECT_EQ(runs[2], (Range{190, 10}));
  EXPECT_EQ(ranged.layout().kind, MaskLayout::Kind::kRanges);

  const uint64_t scattered[] = {1, 3, 5, 64, 130};
  Mask sparse;
  ASSERT_TRUE(Mask::from_indices(200, scattered, 5, &sparse).ok());
  const MaskLayout layout = sparse.layout();
  EXPECT_EQ(layout.kind, MaskLayout::Kind::kIndices);
  EXPECT_EQ(layout.indices, std::vector<uint64_t>(std::begin(scattered), std::end(scattered)));

  // Runs of a random mask rebuild it exactly, across word boundaries.
  const Mask r = random_mask(777, 0.6, 9);
  Mask rebuilt(777);
  for (const Range& run : r.runs()) rebuilt.set_range(run.start, run.length, true);
  EXPECT_EQ(rebuilt, r);
  EXPECT_TRUE(Mask(0).runs().empty());
}

TEST(Mask, CopyBitsAndSetRangeKeepTheCount) {
  const Mask src = random_mask(500, 0.5, 4);
  for (uint64_t offset : {0u, 1u, 63u, 64u, 65u, 130u}) {
    Mask dst(600, true);
    dst.copy_bits(offset, src, 7, 400);
    uint64_t kept = 0;
    for (uint64_t i = 0; i < 600; ++i) {
      const bool expect = (i >= offset && i < offset + 400) ? src.test(i - offset + 7) : true;
      EXPECT_EQ(dst.test(i), expect) << "offset " << offset << " i " << i;
      kept += expect;
    }
    EXPECT_EQ(dst.kept(), kept);
  }
  const auto bitmap = src.to_bitmap();
  EXPECT_EQ(Mask::from_bitmap(bitmap.data(), 500), src);
  EXPECT_TRUE(src.any_kept(0, 500));
  EXPECT_FALSE(Mask(10).any_kept(0, 10));
}

}  // namespace
}  // namespace sieve::compress
