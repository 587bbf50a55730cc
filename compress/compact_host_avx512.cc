// SPDX-License-Identifier: Apache-2.0
// compact_host's AVX-512 path, chosen at run time on CPUs with VBMI2 (vpcompressw/vpexpandw for
// 16-bit elements; F has the 32- and 64-bit forms): the mask word itself is the register mask.
// Compress and expand work register to register (the memory forms are slow on some CPUs); a store
// that would pass the compact part's end is a masked store, a load that would is a masked expand
// load, which touches only the elements it needs.
#include "compress/compact_host_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx2,popcnt"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx2,popcnt")
#endif

namespace sieve::compress::detail {
namespace {

template <class T> constexpr unsigned kLanes = 64 / sizeof(T);

template <class T> __m512i compressed(uint32_t k, __m512i v) {
  if constexpr (sizeof(T) == 2) return _mm512_maskz_compress_epi16(__mmask32(k), v);
  else if constexpr (sizeof(T) == 4) return _mm512_maskz_compress_epi32(__mmask16(k), v);
  else return _mm512_maskz_compress_epi64(__mmask8(k), v);
}

template <class T> __m512i expanded(uint32_t k, const uint8_t* p, bool whole_register_fits) {
  if constexpr (sizeof(T) == 2) {
    return whole_register_fits ? _mm512_maskz_expand_epi16(__mmask32(k), _mm512_loadu_si512(p))
                               : _mm512_maskz_expandloadu_epi16(__mmask32(k), p);
  } else if constexpr (sizeof(T) == 4) {
    return whole_register_fits ? _mm512_maskz_expand_epi32(__mmask16(k), _mm512_loadu_si512(p))
                               : _mm512_maskz_expandloadu_epi32(__mmask16(k), p);
  } else {
    return whole_register_fits ? _mm512_maskz_expand_epi64(__mmask8(k), _mm512_loadu_si512(p))
                               : _mm512_maskz_expandloadu_epi64(__mmask8(k), p);
  }
}

// The first n elements of v at p.
template <class T> void store_first(uint8_t* p, __m512i v, unsigned n) {
  if constexpr (sizeof(T) == 2) _mm512_mask_storeu_epi16(p, __mmask32(n == 32 ? ~0u : (1u << n) - 1), v);
  else if constexpr (sizeof(T) == 4) _mm512_mask_storeu_epi32(p, __mmask16((1u << n) - 1), v);
  else _mm512_mask_storeu_epi64(p, __mmask8((1u << n) - 1), v);
}

struct Isa {
  static uint64_t run_end(const uint32_t* bits, uint64_t w, uint64_t w_end, uint32_t word) {
    const __m512i same = _mm512_set1_epi32(int(word));
    for (; w + 16 <= w_end; w += 16) {
      const __mmask16 differ = _mm512_cmpneq_epi32_mask(_mm512_loadu_si512(bits + w), same);
      if (differ) return w + unsigned(__builtin_ctz(differ));
    }
    while (w < w_end && bits[w] == word) ++w;
    return w;
  }

  template <class T> static void gather_word(uint32_t m, const uint8_t* src, uint8_t* out, const uint8_t* out_end) {
    constexpr unsigned L = kLanes<T>, kRegisters = 32 / L;
    // Every register is loaded before any store: in place, out may lie inside them.
    __m512i v[kRegisters];
    for (unsigned r = 0; r < kRegisters; ++r) v[r] = _mm512_loadu_si512(src + r * 64);
    for (unsigned r = 0; r < kRegisters; ++r) {
      const uint32_t k = L == 32 ? m : (m >> (r * L)) & ((1u << L) - 1);
      const unsigned n = unsigned(__builtin_popcount(k));
      const __m512i c = compressed<T>(k, v[r]);
      if (out + 64 <= out_end) _mm512_storeu_si512(out, c);
      else store_first<T>(out, c, n);
      out += n * sizeof(T);
    }
  }

  static void copy_run(uint8_t* dst, const uint8_t* src, size_t bytes, bool stream) {
    if (!stream || bytes < 256) return void(std::memmove(dst, src, bytes));
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;  // up to a line boundary
    _mm512_storeu_si512(dst, _mm512_loadu_si512(src));
    dst += head, src += head, bytes -= head;
    for (; bytes >= 64; dst += 64, src += 64, bytes -= 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_loadu_si512(src));
    std::memcpy(dst, src, bytes);
  }
  static void zero_run(uint8_t* dst, size_t bytes, bool stream) {
    if (!stream || bytes < 256) return void(std::memset(dst, 0, bytes));
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
    _mm512_storeu_si512(dst, _mm512_setzero_si512());
    dst += head, bytes -= head;
    for (; bytes >= 64; dst += 64, bytes -= 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_setzero_si512());
    std::memset(dst, 0, bytes);
  }
  static void fence() { _mm_sfence(); }

  template <class T> static void scatter_word(uint32_t m, const uint8_t* in, const uint8_t* in_end, uint8_t* dst) {
    constexpr unsigned L = kLanes<T>, kRegisters = 32 / L;
    const uint8_t* next = in + size_t(__builtin_popcount(m)) * sizeof(T);
    for (unsigned r = kRegisters; r-- > 0;) {
      const uint32_t k = L == 32 ? m : (m >> (r * L)) & ((1u << L) - 1);
      next -= size_t(__builtin_popcount(k)) * sizeof(T);
      const __m512i v = expanded<T>(k, next, next + 64 <= in_end);
      _mm512_storeu_si512(dst + r * 64, v);
    }
  }
};

#include "compress/compact_host_driver.inc"

}  // namespace

void compact_gather_avx512(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                           uint8_t* compact, const uint8_t* compact_end, bool stream) {
  gather_any<Isa>(es, bits, begin, end, src, compact, compact_end, stream);
}

void compact_scatter_avx512(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* compact,
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
void compact_gather_avx512(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                           uint8_t* compact, const uint8_t* compact_end, bool stream) {
  compact_gather_scalar(es, bits, begin, end, src, compact, compact_end, stream);
}
void compact_scatter_avx512(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* compact,
                            const uint8_t* compact_end, uint8_t* dst, bool in_place, bool stream) {
  compact_scatter_scalar(es, bits, begin, end, compact, compact_end, dst, in_place, stream);
}
}  // namespace sieve::compress::detail
#endif
