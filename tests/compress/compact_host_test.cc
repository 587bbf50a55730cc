// SPDX-License-Identifier: Apache-2.0
#include "compress/compact_host.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress/tile_layout.h"

namespace sieve::compress {
namespace {

struct Kind {
  std::string name;
  std::vector<uint8_t> keep;  // one byte per element
};

std::vector<Kind> mask_kinds(uint64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Kind> kinds;
  for (double d : {0.01, 0.05, 0.2, 0.5, 0.95}) {
    Kind k{"unstructured d=" + std::to_string(d), std::vector<uint8_t>(count)};
    for (auto& b : k.keep) b = double(rng() % 100000) < d * 100000;
    kinds.push_back(std::move(k));
  }
  Kind two4{"2:4", std::vector<uint8_t>(count)};
  for (uint64_t g = 0; g < count; g += 4) {
    const unsigned a = rng() % 4, b = (a + 1 + rng() % 3) % 4;
    for (unsigned i : {a, b})
      if (g + i < count) two4.keep[g + i] = 1;
  }
  kinds.push_back(std::move(two4));
  // Channels of a row length that is no multiple of 32: runs start and end inside words.
  Kind channels{"channels", std::vector<uint8_t>(count)};
  for (uint64_t row = 0; row * 147 < count; ++row)
    if (rng() % 3 == 0)
      for (uint64_t i = row * 147; i < std::min(count, (row + 1) * 147); ++i) channels.keep[i] = 1;
  kinds.push_back(std::move(channels));
  Kind blocks{"blocks 64", std::vector<uint8_t>(count)};
  for (uint64_t b = 0; b * 64 < count; ++b)
    if (rng() % 2)
      for (uint64_t i = b * 64; i < std::min(count, (b + 1) * 64); ++i) blocks.keep[i] = 1;
  kinds.push_back(std::move(blocks));
  kinds.push_back({"empty", std::vector<uint8_t>(count, 0)});
  kinds.push_back({"full", std::vector<uint8_t>(count, 1)});
  return kinds;
}

// Bytes that make every bit pattern count: NaNs, -0.0, denormals.
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// A buffer of exactly n bytes starting `misalign` bytes past an allocation (ASan sees any overrun).
struct Buffer {
  Buffer(size_t n, size_t misalign) : storage(n + misalign), offset(misalign) {}
  uint8_t* data() { return storage.data() + offset; }
  std::vector<uint8_t> storage;
  size_t offset;
};

// memcmp that accepts the null data() of an empty vector when n is 0.
bool same(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

struct Case {
  SimdLevel level;
  size_t es;
  uint64_t first, span;
  size_t misalign;
  unsigned threads;
  uint64_t bytes_per_thread;
  uint64_t stream_bytes = uint64_t(1) << 40;
};

std::string describe(const Case& c, const Kind& kind) {
  return std::string(simd_level_name(c.level)) + " es=" + std::to_string(c.es) + " " + kind.name +
         " first=" + std::to_string(c.first) + " span=" + std::to_string(c.span) +
         " misalign=" + std::to_string(c.misalign) + " threads=" + std::to_string(c.threads) +
         (c.stream_bytes == 0 ? " streaming" : "");
}

void check(const Case& c, const Kind& kind) {
  const uint64_t count = kind.keep.size();
  const Mask mask = Mask::from_bytes(kind.keep.data(), count);
  const TileLayout layout = build_tile_layout(mask, 0, count);
  const CompactMask cm{layout.bits.data(), layout.tile_base.data(), count};
  HostCompactOptions options;
  options.simd = c.level;
  options.threads = c.threads;
  options.bytes_per_thread = c.bytes_per_thread;
  options.stream_bytes = c.stream_bytes;
  const size_t es = c.es;
  const std::string what = describe(c, kind);

  // The reference, element by element.
  const std::vector<uint8_t> values = random_bytes(count * es, count + es);
  std::vector<uint8_t> expect_compact;
  for (uint64_t i = c.first; i < c.first + c.span; ++i)
    if (kind.keep[i]) expect_compact.insert(expect_compact.end(), &values[i * es], &values[i * es] + es);
  const uint64_t kept = expect_compact.size() / es;
  ASSERT_EQ(kept_before(cm, c.first + c.span) - kept_before(cm, c.first), kept) << what;

  // Out of place.
  Buffer src(count * es, c.misalign), compact(kept * es, c.misalign), dst(count * es, c.misalign);
  std::memcpy(src.data(), values.data(), values.size());
  gather_host(cm, c.first, c.span, es, src.data(), compact.data(), options);
  ASSERT_TRUE(same(compact.data(), expect_compact.data(), kept * es)) << "gather " << what;
  ASSERT_TRUE(same(src.data(), values.data(), values.size())) << "gather wrote its source " << what;

  std::memset(dst.data(), 0xAB, count * es);
  scatter_host(cm, c.first, c.span, es, compact.data(), dst.data(), options);
  uint64_t j = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* got = dst.data() + i * es;
    std::vector<uint8_t> want(es, 0xAB);
    if (i >= c.first && i < c.first + c.span) {
      want.assign(es, 0);
      if (kind.keep[i]) std::memcpy(want.data(), &expect_compact[(j++) * es], es);
    }
    ASSERT_TRUE(same(got, want.data(), es)) << "scatter element " << i << " " << what;
  }

  // In place: the kept elements move to the span's front, then back out of it.
  Buffer buffer(count * es, c.misalign);
  std::memcpy(buffer.data(), values.data(), values.size());
  uint8_t* front = buffer.data() + c.first * es;
  gather_host(cm, c.first, c.span, es, buffer.data(), front, options);
  ASSERT_TRUE(same(front, expect_compact.data(), kept * es)) << "gather in place " << what;
  scatter_host(cm, c.first, c.span, es, front, buffer.data(), options);
  ASSERT_TRUE(same(buffer.data() + c.first * es, dst.data() + c.first * es, c.span * es))
      << "scatter in place " << what;
  ASSERT_TRUE(same(buffer.data(), values.data(), c.first * es)) << "in place wrote before the span " << what;
  const size_t after = (c.first + c.span) * es;
  ASSERT_TRUE(same(buffer.data() + after, values.data() + after, count * es - after))
      << "in place wrote after the span " << what;
}

std::vector<SimdLevel> levels() { return {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}; }

TEST(CompactHost, EveryPathDtypeAndMaskKindMatchesTheReference) {
  const uint64_t count = 3 * kTileElements + 1000 + 37;  // several tiles, a ragged last word
  for (SimdLevel level : levels())
    for (size_t es : {2, 4, 8})
      for (const Kind& kind : mask_kinds(count, es))
        for (auto [first, span] : {std::pair<uint64_t, uint64_t>{0, count},
                                   {7, count - 7 - 5},
                                   {33, 60},
                                   {64, 31},
                                   {5, 20},
                                   {kTileElements - 3, kTileElements + 70},
                                   {count - 1, 1},
                                   {0, 0}})
          for (size_t misalign : {size_t(0), es / 2 + 1})
            for (uint64_t stream_bytes : {uint64_t(1) << 40, uint64_t(0)})
              check({level, es, first, span, misalign, 1, 1 << 30, stream_bytes}, kind);
}

// Parts on threads: each part's compact place comes from tile_base, so every cut (inside words,
// tiles, runs) gives the one-thread result.
TEST(CompactHost, ThreadedPartsEqualTheReference) {
  const uint64_t count = 5 * kTileElements + 777;
  for (SimdLevel level : levels())
    for (size_t es : {2, 4, 8})
      for (const Kind& kind : mask_kinds(count, 100 + es))
        for (unsigned threads : {2u, 3u})
          for (auto [first, span] : {std::pair<uint64_t, uint64_t>{0, count}, {13, count - 13 - 100}})
            check({level, es, first, span, 1, threads, 1024}, kind);
}

TEST(CompactHost, ForcedLevelsRunTheirOwnPath) {
  EXPECT_EQ(compact_simd_level(SimdLevel::kScalar), SimdLevel::kScalar);
  if (simd_level_supported(SimdLevel::kAvx2)) { EXPECT_EQ(compact_simd_level(SimdLevel::kAvx2), SimdLevel::kAvx2); }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (simd_level_supported(SimdLevel::kAvx512) && __builtin_cpu_supports("avx512vbmi2")) {
    EXPECT_EQ(compact_simd_level(SimdLevel::kAvx512), SimdLevel::kAvx512);
  } else {
    EXPECT_NE(compact_simd_level(SimdLevel::kAvx512), SimdLevel::kAvx512);
  }
#endif
  EXPECT_EQ(compact_simd_level(SimdLevel::kAuto), compact_simd_level(SimdLevel::kAvx512));
}

}  // namespace
}  // namespace sieve::compress
