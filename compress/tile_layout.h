// SPDX-License-Identifier: Apache-2.0
// The layout the GPU gather/scatter kernels consume: the kept elements of a span of a mask as a
// bitmap (one bit per element, 32 per word, bit 0 = the span's first element) plus, per tile of
// kTileElements, how many elements before the tile are kept. A kernel block takes a tile, counts
// kept elements with warp ballots and finds every element's compact position from the tile's base,
// so no per-element index is stored: count/8 + 8 * count/kTileElements bytes instead of 4 * nnz.
// Built on the host at plan time (this file, tested on the CPU) and uploaded once.
#pragma once

#include <cstdint>
#include <vector>

#include "compress/mask.h"

namespace sieve::compress {

// 256 threads x 8 elements: one tile per block iteration.
constexpr uint64_t kTileElements = 2048;

struct TileLayout {
  uint64_t count = 0;               // elements spanned
  uint64_t nnz = 0;                 // kept elements among them
  std::vector<uint32_t> bits;       // ceil(count / 32) words; bits past count are zero
  std::vector<uint64_t> tile_base;  // ceil(count / kTileElements) + 1 entries; the last is nnz
};

// The layout of mask elements [first, first + count). first + count must not exceed mask.count().
TileLayout build_tile_layout(const Mask& mask, uint64_t first, uint64_t count);

// What the kernels compute, on the host: the reference the GPU tests compare against. element_size
// is 2, 4 or 8 bytes.
void gather_reference(const TileLayout& layout, size_t element_size, const void* src, void* compact);
void scatter_reference(const TileLayout& layout, size_t element_size, const void* compact, void* dst);

}  // namespace sieve::compress
