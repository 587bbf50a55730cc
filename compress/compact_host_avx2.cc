// SPDX-License-Identifier: Apache-2.0
// compact_host's AVX2 path, chosen at run time: each byte of a mask word selects a permutation from
// a table built at compile time (vpermd for 32- and 64-bit elements, pshufb for 16-bit ones), and the
// register moves popcount elements. Stores past the compact part's end, and loads past it, go through
// a small buffer instead.
#include "compress/compact_host_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,popcnt"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,popcnt")
#endif

namespace sieve::compress::detail {
namespace {

struct Tables {
  // gather: lane j takes the j-th kept lane; scatter: kept lane i takes the lane of its rank.
  uint32_t compress32[256][8];  // 8 x 32-bit lanes, for vpermd
  uint32_t expand32[256][8];
  uint8_t compress16[256][16];  // 8 x 16-bit lanes, for pshufb (0x80: zero)
  uint8_t expand16[256][16];
  uint32_t compress64[16][8];  // 4 x 64-bit lanes as pairs of 32-bit ones, for vpermd
  uint32_t expand64[16][8];
};

constexpr Tables make_tables() {
  Tables t{};
  for (unsigned k = 0; k < 256; ++k) {
    unsigned rank = 0;
    for (unsigned i = 0; i < 8; ++i) {
      t.compress16[k][2 * i] = t.compress16[k][2 * i + 1] = 0x80;
      t.expand16[k][2 * i] = t.expand16[k][2 * i + 1] = 0x80;
    }
    for (unsigned i = 0; i < 8; ++i) {
      if (!((k >> i) & 1u)) continue;
      t.compress32[k][rank] = i;
      t.expand32[k][i] = rank;
      t.compress16[k][2 * rank] = uint8_t(2 * i), t.compress16[k][2 * rank + 1] = uint8_t(2 * i + 1);
      t.expand16[k][2 * i] = uint8_t(2 * rank), t.expand16[k][2 * i + 1] = uint8_t(2 * rank + 1);
      if (k < 16 && i < 4) {
        t.compress64[k][2 * rank] = 2 * i, t.compress64[k][2 * rank + 1] = 2 * i + 1;
        t.expand64[k][2 * i] = 2 * rank, t.expand64[k][2 * i + 1] = 2 * rank + 1;
      }
      ++rank;
    }
  }
  return t;
}

alignas(32) constexpr Tables kTables = make_tables();

// Lanes per register and mask bits per register: 16-bit elements use 128-bit registers (pshufb
// permutes within 128-bit lanes), the others 256-bit ones.
template <class T> constexpr unsigned kLanes = sizeof(T) == 2 ? 8 : 32 / sizeof(T);

template <class T> __m256i permuted(const uint8_t* p, unsigned k, bool expand) {
  if constexpr (sizeof(T) == 2) {
    const auto* table = expand ? kTables.expand16[k] : kTables.compress16[k];
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi128_si256(_mm_shuffle_epi8(v, _mm_load_si128(reinterpret_cast<const __m128i*>(table))));
  } else {
    const uint32_t* table = sizeof(T) == 4 ? (expand ? kTables.expand32[k] : kTables.compress32[k])
                                           : (expand ? kTables.expand64[k] : kTables.compress64[k]);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    __m256i r = _mm256_permutevar8x32_epi32(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(table)));
    if (expand) {  // vpermd cannot zero a lane: clear the pruned ones
      __m256i keep;
      if constexpr (sizeof(T) == 4) {
        const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        keep = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(k)), lane_bits), lane_bits);
      } else {
        const __m256i lane_bits = _mm256_setr_epi64x(1, 2, 4, 8);
        keep = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(k), lane_bits), lane_bits);
      }
      r = _mm256_and_si256(r, keep);
    }
    return r;
  }
}

template <class T> void store(uint8_t* p, __m256i v) {
  if constexpr (sizeof(T) == 2) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(v));
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

struct Isa {
  static uint64_t run_end(const uint32_t* bits, uint64_t w, uint64_t w_end, uint32_t word) {
    const __m256i same = _mm256_set1_epi32(int(word));
    for (; w + 8 <= w_end; w += 8) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + w));
      const unsigned equal = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, same))));
      if (equal != 0xFF) return w + unsigned(__builtin_ctz(~equal));
    }
    while (w < w_end && bits[w] == word) ++w;
    return w;
  }

  template <class T> static void gather_word(uint32_t m, const uint8_t* src, uint8_t* out, const uint8_t* out_end) {
    constexpr unsigned L = kLanes<T>, kRegisters = 32 / L;
    constexpr size_t kBytes = L * sizeof(T);
    for (unsigned r = 0; r < kRegisters; ++r, m >>= L, src += kBytes) {
      const unsigned k = m & ((1u << L) - 1);
      const __m256i v = permuted<T>(src, k, false);
      const size_t n = size_t(__builtin_popcount(k)) * sizeof(T);
      if (out + kBytes <= out_end) {
        store<T>(out, v);
      } else {
        alignas(32) uint8_t spill[32];
        store<T>(spill, v);
        std::memcpy(out, spill, n);
      }
      out += n;
    }
  }

  static void copy_run(uint8_t* dst, const uint8_t* src, size_t bytes, bool stream) {
    if (!stream || bytes < 128) return void(std::memmove(dst, src, bytes));
    const size_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;  // up to a 32-byte boundary
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    dst += head, src += head, bytes -= head;
    for (; bytes >= 32; dst += 32, src += 32, bytes -= 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    std::memcpy(dst, src, bytes);
  }
  static void zero_run(uint8_t* dst, size_t bytes, bool stream) {
    if (!stream || bytes < 128) return void(std::memset(dst, 0, bytes));
    const size_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_setzero_si256());
    dst += head, bytes -= head;
    for (; bytes >= 32; dst += 32, bytes -= 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), _mm256_setzero_si256());
    std::memset(dst, 0, bytes);
  }
  static void fence() { _mm_sfence(); }

  template <class T> static void scatter_word(uint32_t m, const uint8_t* in, const uint8_t* in_end, uint8_t* dst) {
    constexpr unsigned L = kLanes<T>, kRegisters = 32 / L;
    constexpr size_t kBytes = L * sizeof(T);
    const uint8_t* next = in + size_t(__builtin_popcount(m)) * sizeof(T);
    for (unsigned r = kRegisters; r-- > 0;) {
      const unsigned k = (m >> (r * L)) & ((1u << L) - 1);
      next -= size_t(__builtin_popcount(k)) * sizeof(T);
      __m256i v;
      if (next + kBytes <= in_end) {
        v = permuted<T>(next, k, true);
      } else {
        alignas(32) uint8_t spill[32] = {};
        std::memcpy(spill, next, size_t(__builtin_popcount(k)) * sizeof(T));
        v = permuted<T>(spill, k, true);
      }
      store<T>(dst + r * kBytes, v);
    }
  }
};

#include "compress/compact_host_driver.inc"

}  // namespace

void compact_gather_avx2(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                         uint8_t* compact, const uint8_t* compact_end, bool stream) {
  gather_any<Isa>(es, bits, begin, end, src, compact, compact_end, stream);
}

void compact_scatter_avx2(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* compact,
                          const uint8_t* compact_end, uint8_t* dst, bool in_place, bool stream) {
  scatter_any<Isa>(es, bits, begin, end, compact, compact_end, dst, in_place, stream);
}

}  // namespace sieve::compress::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64: compact_simd_level never chooses this path
namespace sieve::compress::detail {
void compact_gather_avx2(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                         uint8_t* compact, const uint8_t* compact_end, bool stream) {
  compact_gather_scalar(es, bits, begin, end, src, compact, compact_end, stream);
}
void compact_scatter_avx2(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* compact,
                          const uint8_t* compact_end, uint8_t* dst, bool in_place, bool stream) {
  compact_scatter_scalar(es, bits, begin, end, compact, compact_end, dst, in_place, stream);
}
}  // namespace sieve::compress::detail
#endif
