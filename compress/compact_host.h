// SPDX-License-Identifier: Apache-2.0
// Gather and scatter of a mask's kept elements on the CPU: the host twin of compress/cuda's kernels,
// reading the same TileLayout (bits + tile_base) and writing the same bits. Whole words of kept
// elements are copied as runs (a channel or block mask reads one bit word per 32 elements and
// moves them with memmove); mixed words go through vpcompress/vpexpand (AVX-512 with VBMI2), a
// permutation table (AVX2) or a bit loop (scalar), chosen at run time from the codec's SimdLevel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/codec.h"

namespace sieve::compress {

// A mask as the kernels read it (tile_layout.h): bits of count elements, tile_base per kTileElements.
struct CompactMask {
  const uint32_t* bits = nullptr;
  const uint64_t* tile_base = nullptr;
  uint64_t count = 0;
};

struct HostCompactOptions {
  // kAuto: the best this CPU runs; a level it cannot run falls back to the best below it. Tests force
  // each level to check every path on one machine.
  SimdLevel simd = SimdLevel::kAuto;
  // The most threads one call may use (the job's own thread count); it uses fewer, one when the
  // copy is too small to pay for starting a thread, and one when it works in place.
  unsigned threads = 1;
  // Bytes of span each thread must have before a second one starts (tests lower it to split small
  // spans). A thread is started per call: on a shared 2-core machine a second one measured slower
  // than one at 64 MiB (it waits for a core), so only spans of several tens of MiB are split.
  uint64_t bytes_per_thread = uint64_t(16) << 20;
  // A call that writes at least this many bytes (half this machine class's L3) uses non-temporal
  // stores where they line up: its output would not stay in the cache anyway, and they skip reading
  // each line before writing it. Never in place.
  uint64_t stream_bytes = uint64_t(16) << 20;
};

// The level a call with `requested` runs. kAvx512 needs VBMI2 (16-bit vpcompressw) besides the
// codec's F/BW/VL; a CPU without it runs the AVX2 path.
SimdLevel compact_simd_level(SimdLevel requested);

// Kept elements of the mask before element e (e <= count): tile_base plus at most a tile of popcounts.
uint64_t kept_before(const CompactMask& mask, uint64_t e);

// The kept elements of elements [first, first + span) of the mask: gather copies them from src
// (element 0 of the masked buffer) into compact in order; scatter writes them back from compact
// into dst (element 0 of the masked buffer) and +0 (all bits clear) into every pruned element of
// the span. element_size is 2, 4 or 8; elements move as bits. Buffers need no alignment. compact
// may be exactly src + first elements (gather in place: the kept elements move to the span's front)
// or exactly dst + first elements (scatter in place); any other overlap is the caller's error. The
// caller checks the arguments (plugin/compact_api.cc does, at the C boundary).
void gather_host(const CompactMask& mask, uint64_t first, uint64_t span, size_t element_size, const void* src,
                 void* compact, const HostCompactOptions& options = {});
void scatter_host(const CompactMask& mask, uint64_t first, uint64_t span, size_t element_size, const void* compact,
                  void* dst, const HostCompactOptions& options = {});

}  // namespace sieve::compress
