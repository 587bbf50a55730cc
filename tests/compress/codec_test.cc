// SPDX-License-Identifier: Apache-2.0
#include "compress/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "compress/codec_bench/sparse_data.h"

namespace sieve::compress {
namespace {

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (simd_level_supported(l)) out.push_back(l);
  return out;
}

std::vector<uint8_t> encode_vec(const uint8_t* src, size_t n, CodecOptions o, size_t dst_offset = 0) {
  std::vector<uint8_t> dst(encode_bound(n) + dst_offset);
  const size_t written = encode(src, n, dst.data() + dst_offset, encode_bound(n), o);
  EXPECT_GE(written, kFrameHeaderSize);
  return std::vector<uint8_t>(dst.begin() + long(dst_offset), dst.begin() + long(dst_offset + written));
}

TEST(Codec, ReportsTheSimdLevelsThisMachineRuns) {
  std::string names;
  for (SimdLevel l : levels()) names += std::string(simd_level_name(l)) + " ";
  std::printf("codec SIMD levels tested here: %s(detected %s)\n", names.c_str(),
              simd_level_name(detected_simd_level()));
  EXPECT_TRUE(simd_level_supported(SimdLevel::kScalar));
}

// decode(encode(x)) == x for random contents x densities x sizes x alignments x word sizes, and
// every SIMD level writes exactly the scalar path's bytes.
TEST(Codec, RoundTripsAndSimdMatchesScalarBitForBit) {
  const size_t sizes[] = {0,  1,  2,  3,   4,   5,   7,   8,    15,   16,   17,   31,    32,        33,
                          63, 64, 65, 127, 128, 129, 255, 1000, 4095, 4096, 4097, 10007, 65536 + 3, (1 << 20) + 6};
  const double densities[] = {0.0, 0.05, 0.3, 0.5, 0.8, 0.95, 1.0};
  uint32_t seed = 1;
  for (size_t n : sizes)
    for (double d : densities)
      for (size_t element : {size_t{4}, size_t{2}})
        for (WordSize ws : {WordSize::kAuto, WordSize::kFour, WordSize::kTwo}) {
          const size_t align = seed % 4;
          std::vector<uint8_t> storage = sparse_data(n + align, element, d, seed++);
          const uint8_t* src = storage.data() + align;
          CodecOptions o;
          o.word_size = ws;
          o.max_ratio = 1e9;  // zero-elide whenever it is not larger than raw
          o.simd = SimdLevel::kScalar;
          const std::vector<uint8_t> reference = encode_vec(src, n, o);
          for (SimdLevel level : levels()) {
            o.simd = level;
            const std::vector<uint8_t> frame = encode_vec(src, n, o, (seed + 1) % 4);
            ASSERT_EQ(frame, reference) << "n=" << n << " d=" << d << " level=" << simd_level_name(level);
            for (SimdLevel decode_level : levels()) {
              std::vector<uint8_t> out(n + 8, 0xAB);
              size_t out_len = 1;
              ASSERT_EQ(decode(frame.data(), frame.size(), out.data() + 1, n, &out_len, decode_level),
                        DecodeStatus::kOk);
              ASSERT_EQ(out_len, n);
              ASSERT_TRUE(n == 0 || std::memcmp(out.data() + 1, src, n) == 0) << "n=" << n << " d=" << d;
              ASSERT_EQ(out[0], 0xAB);  // nothing written before the destination
              for (size_t i = n + 1; i < out.size(); ++i) ASSERT_EQ(out[i], 0xAB) << "wrote past the destination";
            }
          }
        }
}

TEST(Codec, SizeMeetsTheBarsForFp32AndSixteenBitData) {
  const size_t n = 1 << 20;
  for (double d = 0.05; d < 0.96; d += 0.1) {
    const auto f32 = sparse_data(n, 4, d, 7);
    const auto bf16 = sparse_data(n, 2, d, 8);
    const double f32_ratio = double(encode_vec(f32.data(), n, {}).size()) / n;
    const double bf16_ratio = double(encode_vec(bf16.data(), n, {}).size()) / n;
    EXPECT_LE(f32_ratio, d + 1.0 / 32 + 0.005) << "d=" << d;
    EXPECT_LE(bf16_ratio, d + 1.0 / 16 + 0.005) << "d=" << d;
  }
}

TEST(Codec, AutoWordSizeFollowsTheData) {
  const auto f32 = sparse_data(1 << 16, 4, 0.3, 3);
  const auto bf16 = sparse_data(1 << 16, 2, 0.3, 4);
  EXPECT_EQ(estimate(f32.data(), f32.size()).word_size, WordSize::kFour);
  EXPECT_EQ(estimate(bf16.data(), bf16.size()).word_size, WordSize::kTwo);
  FrameInfo info;
  auto frame = encode_vec(bf16.data(), bf16.size(), {});
  ASSERT_EQ(read_frame_info(frame.data(), frame.size(), &info), DecodeStatus::kOk);
  EXPECT_TRUE(info.zero_elided);
  EXPECT_EQ(info.word_size, 2u);
  EXPECT_EQ(info.frame_length, frame.size());
}

TEST(Codec, DenseDataGoesRawAndStaysWithinTheBound) {
  const auto dense = sparse_data(100000, 4, 1.0, 5);
  auto frame = encode_vec(dense.data(), dense.size(), {});
  EXPECT_EQ(frame.size(), encode_bound(dense.size()));
  EXPECT_FALSE(estimate(dense.data(), dense.size()).pays);
  // Even when the sample lies (zeros sampled, dense elsewhere), the frame never exceeds the bound.
  std::vector<uint8_t> tricky = dense;
  for (size_t i = 0; i < 64; ++i) std::memset(&tricky[(i * (tricky.size() - 64) / 63) & ~size_t{3}], 0, 64);
  frame = encode_vec(tricky.data(), tricky.size(), {});
  EXPECT_LE(frame.size(), encode_bound(tricky.size()));
  std::vector<uint8_t> out(tricky.size());
  size_t len = 0;
  ASSERT_EQ(decode(frame.data(), frame.size(), out.data(), out.size(), &len), DecodeStatus::kOk);
  EXPECT_EQ(out, tricky);
}

TEST(Codec, EncodeRefusesASmallDestinationOrNullPointers) {
  std::vector<uint8_t> src(100, 1), dst(encode_bound(100));
  EXPECT_EQ(encode(src.data(), 100, dst.data(), dst.size() - 1), 0u);
  EXPECT_EQ(encode(nullptr, 100, dst.data(), dst.size()), 0u);
  EXPECT_EQ(encode(src.data(), 100, nullptr, dst.size()), 0u);
  EXPECT_EQ(encode(nullptr, 0, dst.data(), dst.size()), kFrameHeaderSize);
}

class CorruptFrame : public ::testing::Test {
 protected:
  void SetUp() override {
    data = sparse_data(4099, 4, 0.4, 11);
    CodecOptions o;
    o.word_size = WordSize::kFour;
    frame = encode_vec(data.data(), data.size(), o);
    ASSERT_EQ(read_frame_info(frame.data(), frame.size(), &info), DecodeStatus::kOk);
    ASSERT_TRUE(info.zero_elided);
  }
  DecodeStatus run(const std::vector<uint8_t>& f, size_t cap = 1 << 20) {
    std::vector<uint8_t> out(cap);
    size_t len = 99;
    DecodeStatus s = decode(f.data(), f.size(), out.data(), cap, &len);
    if (s != DecodeStatus::kOk) { EXPECT_EQ(len, 0u); }
    return s;
  }
  std::vector<uint8_t> data, frame;
  FrameInfo info;
};

TEST_F(CorruptFrame, EachDefectHasItsOwnStatus) {
  EXPECT_EQ(run(frame), DecodeStatus::kOk);
  EXPECT_EQ(run(frame, data.size() - 1), DecodeStatus::kTooLarge);
  auto f = frame;
  f.pop_back();
  EXPECT_EQ(run(f), DecodeStatus::kTruncated);
  f = frame;
  f.push_back(0);
  EXPECT_EQ(run(f), DecodeStatus::kTrailingBytes);
  f = frame;
  f[0] ^= 1;
  EXPECT_EQ(run(f), DecodeStatus::kBadMagic);
  f = frame;
  f[4] = 9;
  EXPECT_EQ(run(f), DecodeStatus::kBadVersion);
  f = frame;
  f[6] = 3;
  EXPECT_EQ(run(f), DecodeStatus::kBadHeader);
  f = frame;
  f[7] = 1;
  EXPECT_EQ(run(f), DecodeStatus::kBadHeader);
  f = frame;
  f[kFrameHeaderSize] ^= 1;  // one bit of the bitmap flipped: count no longer matches
  EXPECT_EQ(run(f), DecodeStatus::kBitmapMismatch);
  f = std::vector<uint8_t>(frame.begin(), frame.begin() + 10);
  EXPECT_EQ(run(f), DecodeStatus::kTruncated);
  EXPECT_STRNE(decode_status_message(DecodeStatus::kBitmapMismatch), decode_status_message(DecodeStatus::kOk));
}

TEST_F(CorruptFrame, HugeLengthsInTheHeaderAreRefusedNotTrusted) {
  auto f = frame;
  const uint64_t huge = ~uint64_t{0};
  std::memcpy(&f[8], &huge, 8);
  EXPECT_NE(run(f), DecodeStatus::kOk);
  std::memcpy(&f[16], &huge, 8);
  EXPECT_NE(run(f), DecodeStatus::kOk);
}

TEST_F(CorruptFrame, RandomMutationsNeverEscapeTheBuffers) {
  // The fuzz target does this at scale; here a quick deterministic sample of flips and truncations.
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    auto f = frame;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) f[rng() % f.size()] ^= uint8_t(1u << (rng() % 8));
    if (rng() % 4 == 0) f.resize(rng() % f.size());
    const size_t cap = data.size() + 16;
    std::vector<uint8_t> out(cap + 64, 0xCD);
    size_t len = 0;
    if (decode(f.data(), f.size(), out.data(), cap, &len) == DecodeStatus::kOk) { EXPECT_LE(len, cap); }
    for (size_t j = cap; j < out.size(); ++j) ASSERT_EQ(out[j], 0xCD);
  }
}

}  // namespace
}  // namespace sieve::compress
