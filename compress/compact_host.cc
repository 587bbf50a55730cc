// SPDX-License-Identifier: Apache-2.0
// compact_host.h: the scalar path, the choice of path, and the split of a call into threads' parts.
#include "compress/compact_host.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "compress/compact_host_kernels.h"
#include "compress/tile_layout.h"

namespace sieve::compress {
namespace detail {
namespace {

// Bit by bit: what the vector paths must equal, and the path of CPUs without AVX2.
struct Isa {
  static uint64_t run_end(const uint32_t* bits, uint64_t w, uint64_t w_end, uint32_t word) {
    const uint64_t pair = uint64_t(word) << 32 | word;
    for (uint64_t two; w + 2 <= w_end; w += 2) {
      std::memcpy(&two, bits + w, 8);
      if (two != pair) break;
    }
    while (w < w_end && bits[w] == word) ++w;
    return w;
  }
  template <class T> static void gather_word(uint32_t m, const uint8_t* src, uint8_t* out, const uint8_t*) {
    for (; m; m &= m - 1, out += sizeof(T)) {
      T v;
      std::memcpy(&v, src + size_t(__builtin_ctz(m)) * sizeof(T), sizeof(T));
      std::memcpy(out, &v, sizeof(T));
    }
  }
  static void copy_run(uint8_t* dst, const uint8_t* src, size_t bytes, bool) { std::memmove(dst, src, bytes); }
  static void zero_run(uint8_t* dst, size_t bytes, bool) { std::memset(dst, 0, bytes); }
  static void fence() {}
  template <class T> static void scatter_word(uint32_t m, const uint8_t* in, const uint8_t*, uint8_t* dst) {
    T kept[32];  // read first: in place, in may lie inside the 32 elements written
    std::memcpy(kept, in, size_t(__builtin_popcount(m)) * sizeof(T));
    const T* next = kept;
    for (unsigned i = 0; i < 32; ++i, dst += sizeof(T)) {
      const T v = (m >> i) & 1u ? *next++ : T(0);
      std::memcpy(dst, &v, sizeof(T));
    }
  }
};

#include "compress/compact_host_driver.inc"

}  // namespace

void compact_gather_scalar(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                           uint8_t* compact, const uint8_t* compact_end, bool stream) {
  gather_any<Isa>(es, bits, begin, end, src, compact, compact_end, stream);
}

void compact_scatter_scalar(size_t es, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* compact,
                            const uint8_t* compact_end, uint8_t* dst, bool in_place, bool stream) {
  scatter_any<Isa>(es, bits, begin, end, compact, compact_end, dst, in_place, stream);
}

}  // namespace detail

namespace {

bool avx512_vbmi2() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("avx512vbmi2"));
  }();
  return has;
#else
  return false;
#endif
}

// Cut [first, first + span) into parts at word boundaries; run part i on its own thread (part 0 on
// the caller's). part(begin, end, kept before begin within the span, kept before end).
template <class Part> void run_parts(const CompactMask& mask, uint64_t first, uint64_t span, size_t es,
                                     unsigned threads, uint64_t bytes_per_thread, Part part) {
  const uint64_t wanted = std::max<uint64_t>(1, span * es / std::max<uint64_t>(1, bytes_per_thread));
  const unsigned parts = unsigned(std::min<uint64_t>(std::max(threads, 1u), wanted));
  const uint64_t kept_first = kept_before(mask, first);
  std::vector<uint64_t> cut(parts + 1);
  cut[0] = first, cut[parts] = first + span;
  for (unsigned i = 1; i < parts; ++i)
    cut[i] = std::max(cut[i - 1], std::min(first + span, (first + span * i / parts) & ~uint64_t(31)));
  std::vector<uint64_t> kept(parts + 1);
  for (unsigned i = 0; i <= parts; ++i) kept[i] = (i == 0 ? kept_first : kept_before(mask, cut[i])) - kept_first;
  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < parts; ++i) {
    try {
      helpers.emplace_back(part, cut[i], cut[i + 1], kept[i], kept[i + 1]);
    } catch (const std::system_error&) {  // no thread to be had: the caller's thread does the part
      part(cut[i], cut[i + 1], kept[i], kept[i + 1]);
    }
  }
  part(cut[0], cut[1], kept[0], kept[1]);
  for (auto& helper : helpers) helper.join();
}

}  // namespace

SimdLevel compact_simd_level(SimdLevel requested) {
  SimdLevel level = requested == SimdLevel::kAuto ? detected_simd_level() : requested;
  if (!simd_level_supported(level)) level = detected_simd_level();
  if (level == SimdLevel::kAvx512 && !avx512_vbmi2()) level = SimdLevel::kAvx2;
  return level;
}

uint64_t kept_before(const CompactMask& mask, uint64_t e) {
  const uint64_t tile = e / kTileElements;
  uint64_t kept = mask.tile_base[tile];
  for (uint64_t w = tile * (kTileElements / 32); w < e / 32; ++w) kept += uint64_t(__builtin_popcount(mask.bits[w]));
  if (e % 32) kept += uint64_t(__builtin_popcount(mask.bits[e / 32] & ((1u << (e % 32)) - 1)));
  return kept;
}

void gather_host(const CompactMask& mask, uint64_t first, uint64_t span, size_t es, const void* src, void* compact,
                 const HostCompactOptions& options) {
  if (span == 0) return;
  detail::GatherPart fn = detail::compact_gather_scalar;
  switch (compact_simd_level(options.simd)) {
    case SimdLevel::kAvx512: fn = detail::compact_gather_avx512; break;
    case SimdLevel::kAvx2: fn = detail::compact_gather_avx2; break;
    default: break;
  }
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(compact);
  // In place, a later part would write over elements an earlier one has yet to read.
  const bool in_place = out == in + first * es;
  const bool stream =
      !in_place && (kept_before(mask, first + span) - kept_before(mask, first)) * es >= options.stream_bytes;
  run_parts(mask, first, span, es, in_place ? 1u : options.threads, options.bytes_per_thread,
            [&](uint64_t begin, uint64_t end, uint64_t kept_begin, uint64_t kept_end) {
              fn(es, mask.bits, begin, end, in, out + kept_begin * es, out + kept_end * es, stream);
            });
}

void scatter_host(const CompactMask& mask, uint64_t first, uint64_t span, size_t es, const void* compact, void* dst,
                  const HostCompactOptions& options) {
  if (span == 0) return;
  detail::ScatterPart fn = detail::compact_scatter_scalar;
  switch (compact_simd_level(options.simd)) {
    case SimdLevel::kAvx512: fn = detail::compact_scatter_avx512; break;
    case SimdLevel::kAvx2: fn = detail::compact_scatter_avx2; break;
    default: break;
  }
  const auto* in = static_cast<const uint8_t*>(compact);
  auto* out = static_cast<uint8_t*>(dst);
  const bool in_place = in == out + first * es;
  const bool stream = !in_place && span * es >= options.stream_bytes;
  run_parts(mask, first, span, es, in_place ? 1u : options.threads, options.bytes_per_thread,
            [&](uint64_t begin, uint64_t end, uint64_t kept_begin, uint64_t kept_end) {
              fn(es, mask.bits, begin, end, in + kept_begin * es, in + kept_end * es, out, in_place, stream);
            });
}

}  // namespace sieve::compress
