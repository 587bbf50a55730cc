// SPDX-License-Identifier: Apache-2.0
// AVX-512 (F, BW, VL) codec kernels for the shared block loop (codec_block_loop.h), chosen at run time. 32-bit words
// use vpcompressd/vpexpandd directly. 16-bit words are widened to 32-bit lanes for vpcompressd, because the 16-bit
// compress instructions need VBMI2, which this path does not assume. Stores are full registers kept inside the
// destination; loads are full registers kept inside the input.
#include "compress/codec_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "compress/codec_block_loop.h"

// GCC 12 reports the deliberate _mm*_undefined_* pass-through operands of the widening intrinsics
// as maybe-uninitialized (a false positive of its headers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define SIEVE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,popcnt")))

namespace sieve::compress::detail {
namespace {

// 32-bit words, sixteen to a block (two bitmap bytes, one zmm register).
struct Words32 {
  static constexpr size_t kWords = 16, kWordBytes = 4, kReach = 64;

  SIEVE_AVX512 static size_t encode(const uint8_t* src, uint8_t* bitmap, uint8_t* out) {
    const __m512i v = _mm512_loadu_si512(src);
    const __mmask16 m = _mm512_test_epi32_mask(v, v);
    std::memcpy(bitmap, &m, 2);
    _mm512_storeu_si512(out, _mm512_maskz_compress_epi32(m, v));
    return _mm_popcnt_u32(m) * 4;
  }

  SIEVE_AVX512 static size_t decode(const uint8_t* bitmap, const uint8_t* in, uint8_t* dst) {
    __mmask16 m;
    std::memcpy(&m, bitmap, 2);
    _mm512_storeu_si512(dst, _mm512_maskz_expand_epi32(m, _mm512_loadu_si512(in)));
    return _mm_popcnt_u32(m) * 4;
  }
};

// 16-bit words, sixteen to a block, widened to 32-bit lanes for vpcompressd (encode only: decode_avx512
// says why 16-bit words decode with AVX2).
struct Words16 {
  static constexpr size_t kWords = 16, kWordBytes = 2, kReach = 32;

  SIEVE_AVX512 static size_t encode(const uint8_t* src, uint8_t* bitmap, uint8_t* out) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __mmask16 m = _mm256_test_epi16_mask(raw, raw);
    std::memcpy(bitmap, &m, 2);
    const __m512i wide = _mm512_cvtepu16_epi32(raw);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(m, wide)));
    return _mm_popcnt_u32(m) * 2;
  }
};

SIEVE_AVX512 SIEVE_INLINE_KERNEL bool encode32(EncodeCursor& c) { return encode_blocks<Words32>(c); }
SIEVE_AVX512 SIEVE_INLINE_KERNEL bool encode16(EncodeCursor& c) { return encode_blocks<Words16>(c); }
SIEVE_AVX512 SIEVE_INLINE_KERNEL void decode32(DecodeCursor& c) { decode_blocks<Words32>(c); }

}  // namespace

bool encode_avx512(EncodeCursor& c, unsigned word_size) { return word_size == 4 ? encode32(c) : encode16(c); }

void decode_avx512(DecodeCursor& c, unsigned word_size) {
  // For 16-bit words the AVX2 pshufb loop wins: widening + vpexpandd + narrowing costs five
  // shuffle-port uops per 32 bytes against two (measured: 11.8 vs 17.5 GiB/s at d = 0.5).
  // For 32-bit words vpexpandd wins while the packed input is cache-resident (transport chunks:
  // 39 vs 29 GB/s for 1 MiB), but streaming a large frame from DRAM it halves (10 vs 19 GB/s for
  // 64 MiB), so large frames take the vpermd loop.
  constexpr size_t kCacheResidentWords = (4u << 20) / 4;
  if (word_size == 4 && c.words <= kCacheResidentWords) decode32(c);
  else decode_avx2(c, word_size);
}

}  // namespace sieve::compress::detail

#else

namespace sieve::compress::detail {
bool encode_avx512(EncodeCursor&, unsigned) { return true; }
void decode_avx512(DecodeCursor&, unsigned) {}
}  // namespace sieve::compress::detail

#endif
