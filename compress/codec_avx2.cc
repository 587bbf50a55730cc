// SPDX-License-Identifier: Apache-2.0
// AVX2 codec loops (chosen at run time; the rest of the library targets baseline x86-64).
// 32-bit words: compare with zero, then vpermd through a table moves the nonzero lanes together.
// 16-bit words: pshufb through a table, eight words at a time. Full-width stores may write past the
// packed data (never past the destination); later stores or the tail overwrite those bytes.
#include "compress/codec_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "compress/codec_tables.h"

#define SIEVE_AVX2 __attribute__((target("avx2,popcnt")))

namespace sieve::compress::detail {
namespace {

const ShuffleTables& T = kShuffleTables;

SIEVE_AVX2 bool encode32(EncodeCursor& c) {
  const __m256i zero = _mm256_setzero_si256();
  uint8_t* out = c.out;
  size_t b = c.done / 8;
  for (const size_t blocks = c.words / 8; b < blocks; ++b) {
    if (out + 32 > c.limit) break;
    if (size_t(out - c.payload) > c.budget) {
      c.out = out;
      return false;
    }
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.src + b * 32));
    const unsigned zeros = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, zero))));
    const unsigned m = ~zeros & 0xFF;
    c.bitmap[b] = uint8_t(m);
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.compress32[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(v, idx));
    out += _mm_popcnt_u32(m) * 4;
  }
  c.out = out;
  c.done = b * 8;
  return true;
}

SIEVE_AVX2 bool encode16(EncodeCursor& c) {
  const __m256i zero = _mm256_setzero_si256();
  uint8_t* out = c.out;
  size_t b = c.done / 16;
  for (const size_t blocks = c.words / 16; b < blocks; ++b) {
    if (out + 32 > c.limit) break;
    if (size_t(out - c.payload) > c.budget) {
      c.out = out;
      return false;
    }
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.src + b * 32));
    const __m256i z = _mm256_cmpeq_epi16(v, zero);
    // packs keeps lanes apart: bits 0-7 are words 0-7, bits 16-23 words 8-15.
    const unsigned nonzero = ~unsigned(_mm256_movemask_epi8(_mm256_packs_epi16(z, z)));
    const unsigned m0 = nonzero & 0xFF, m1 = (nonzero >> 16) & 0xFF;
    c.bitmap[2 * b] = uint8_t(m0);
    c.bitmap[2 * b + 1] = uint8_t(m1);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_shuffle_epi8(lo, _mm_load_si128(reinterpret_cast<const __m128i*>(T.compress16[m0]))));
    out += _mm_popcnt_u32(m0) * 2;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_shuffle_epi8(hi, _mm_load_si128(reinterpret_cast<const __m128i*>(T.compress16[m1]))));
    out += _mm_popcnt_u32(m1) * 2;
  }
  c.out = out;
  c.done = b * 16;
  return true;
}

SIEVE_AVX2 void decode32(DecodeCursor& c) {
  const uint8_t* in = c.in;
  size_t b = c.done / 8;
  for (const size_t blocks = c.words / 8; b < blocks; ++b) {
    if (in + 32 > c.in_end) break;
    const unsigned m = c.bitmap[b];
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.expand32[m]));
    const __m256i keep = _mm256_load_si256(reinterpret_cast<const __m256i*>(T.lane_mask32[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c.dst + b * 32),
                        _mm256_and_si256(_mm256_permutevar8x32_epi32(p, idx), keep));
    in += _mm_popcnt_u32(m) * 4;
  }
  c.in = in;
  c.done = b * 8;
}

SIEVE_AVX2 void decode16(DecodeCursor& c) {
  const uint8_t* in = c.in;
  size_t b = c.done / 8;
  for (const size_t blocks = c.words / 8; b < blocks; ++b) {
    if (in + 16 > c.in_end) break;
    const unsigned m = c.bitmap[b];
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i idx = _mm_load_si128(reinterpret_cast<const __m128i*>(T.expand16[m]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c.dst + b * 16), _mm_shuffle_epi8(p, idx));
    in += _mm_popcnt_u32(m) * 2;
  }
  c.in = in;
  c.done = b * 8;
}

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
