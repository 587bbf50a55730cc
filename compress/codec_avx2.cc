// SPDX-License-Identifier: Apache-2.0
// AVX2 codec kernels for the shared block loop, codec_block_loop.h (chosen at run time; the rest of the library targets
// baseline x86-64). 32-bit words: compare with zero, then vpermd through a table moves the nonzero lanes together.
// 16-bit words: pshufb through a table, eight words at a time. Full-width stores may write past the
// packed data (never past the destination); later stores or the tail overwrite those bytes.
#include "compress/codec_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "compress/codec_block_loop.h"
#include "compress/codec_tables.h"

#define SIEVE_AVX2 __attribute__((target("avx2,popcnt")))

namespace sieve::compress::detail {
namespace {

const ShuffleTables& T = kShuffleTables;

// 32-bit words, eight to a block (one bitmap byte, one ymm register).
struct Words32 {
  static constexpr size_t kWords = 8, kWordBytes = 4, kReach = 32;

  SIEVE_AVX2 static size_t encode(const uint8_t* src, uint8_t* bitmap, uint8_t* out) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i zero = _mm256_setzero_si256();
    const unsigned zeros = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, zero))));
    const unsigned m = ~zeros & 0xFF;
    bitmap[0] = uint8_t(m);
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.compress32[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(v, idx));
    return _mm_popcnt_u32(m) * 4;
  }

  SIEVE_AVX2 static size_t decode(const uint8_t* bitmap, const uint8_t* in, uint8_t* dst) {
    const unsigned m = bitmap[0];
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.expand32[m]));
    const __m256i keep = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.lane_mask32[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_and_si256(_mm256_permutevar8x32_epi32(p, idx), keep));
    return _mm_popcnt_u32(m) * 4;
  }
};

// 16-bit words, sixteen to an encoded block (one ymm load, two xmm stores) and eight to a decoded
// one (one xmm load and store).
struct Words16Encode {
  static constexpr size_t kWords = 16, kWordBytes = 2, kReach = 32;

  SIEVE_AVX2 static size_t encode(const uint8_t* src, uint8_t* bitmap, uint8_t* out) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i z = _mm256_cmpeq_epi16(v, _mm256_setzero_si256());
    // packs keeps lanes apart: bits 0-7 are words 0-7, bits 16-23 words 8-15.
    const unsigned nonzero = ~unsigned(_mm256_movemask_epi8(_mm256_packs_epi16(z, z)));
    const unsigned m0 = nonzero & 0xFF, m1 = (nonzero >> 16) & 0xFF;
    bitmap[0] = uint8_t(m0);
    bitmap[1] = uint8_t(m1);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_shuffle_epi8(lo, _mm_load_si128(reinterpret_cast<const __m128i*>(T.compress16[m0]))));
    const size_t first = _mm_popcnt_u32(m0) * 2;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + first),
                     _mm_shuffle_epi8(hi, _mm_load_si128(reinterpret_cast<const __m128i*>(T.compress16[m1]))));
    return first + _mm_popcnt_u32(m1) * 2;
  }
};

struct Words16Decode {
  static constexpr size_t kWords = 8, kWordBytes = 2, kReach = 16;

  SIEVE_AVX2 static size_t decode(const uint8_t* bitmap, const uint8_t* in, uint8_t* dst) {
    const unsigned m = bitmap[0];
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i idx = _mm_load_si128(reinterpret_cast<const __m128i*>(T.expand16[m]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_shuffle_epi8(p, idx));
    return _mm_popcnt_u32(m) * 2;
  }
};

SIEVE_AVX2 SIEVE_INLINE_KERNEL bool encode32(EncodeCursor& c) { return encode_blocks<Words32>(c); }
SIEVE_AVX2 SIEVE_INLINE_KERNEL bool encode16(EncodeCursor& c) { return encode_blocks<Words16Encode>(c); }
SIEVE_AVX2 SIEVE_INLINE_KERNEL void decode32(DecodeCursor& c) { decode_blocks<Words32>(c); }
SIEVE_AVX2 SIEVE_INLINE_KERNEL void decode16(DecodeCursor& c) { decode_blocks<Words16Decode>(c); }

}  // namespace

bool encode_avx2(EncodeCursor& c, unsigned word_size) { return word_size == 4 ? encode32(c) : encode16(c); }

void decode_avx2(DecodeCursor& c, unsigned word_size) {
  if (word_size == 4) decode32(c);
  else decode16(c);
}

__attribute__((target("popcnt"))) uint64_t popcount_fast(const uint8_t* bytes, size_t n) {
  uint64_t total = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, bytes + i, sizeof w);
    total += uint64_t(_mm_popcnt_u64(w));
  }
  for (; i < n; ++i) total += uint64_t(_mm_popcnt_u32(bytes[i]));
  return total;
}

}  // namespace sieve::compress::detail

#else  // no x86-64: the scalar loops do everything

namespace sieve::compress::detail {
bool encode_avx2(EncodeCursor&, unsigned) { return true; }
void decode_avx2(DecodeCursor&, unsigned) {}
uint64_t popcount_fast(const uint8_t* bytes, size_t n) { return popcount_scalar(bytes, n); }
}  // namespace sieve::compress::detail

#endif
