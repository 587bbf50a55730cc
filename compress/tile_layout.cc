// SPDX-License-Identifier: Apache-2.0
#include "compress/tile_layout.h"

#include <algorithm>
#include <cstring>

namespace sieve::compress {

TileLayout build_tile_layout(const Mask& mask, uint64_t first, uint64_t count) {
  TileLayout l;
  l.count = count;
  l.bits.assign(count / 32 + (count % 32 != 0), 0);
  const std::vector<uint64_t>& words = mask.words();
  // Copy the span's bits 64 at a time, shifted so that the span starts at bit 0.
  for (uint64_t i = 0; i < count; i += 64) {
    const uint64_t at = first + i, w = at >> 6, shift = at & 63;
    uint64_t chunk = words[w] >> shift;
    if (shift && w + 1 < words.size()) chunk |= words[w + 1] << (64 - shift);
    const uint64_t n = count - i < 64 ? count - i : 64;
    if (n < 64) chunk &= (uint64_t(1) << n) - 1;
    l.bits[i / 32] = uint32_t(chunk);
    if (i / 32 + 1 < l.bits.size()) l.bits[i / 32 + 1] = uint32_t(chunk >> 32);
  }
  const uint64_t tiles = count / kTileElements + (count % kTileElements != 0);
  l.tile_base.assign(tiles + 1, 0);
  uint64_t kept = 0;
  for (uint64_t t = 0; t < tiles; ++t) {
    l.tile_base[t] = kept;
    const uint64_t w0 = t * kTileElements / 32, w1 = std::min<uint64_t>(l.bits.size(), (t + 1) * kTileElements / 32);
    for (uint64_t w = w0; w < w1; ++w) kept += uint64_t(__builtin_popcount(l.bits[w]));
  }
  l.tile_base[tiles] = kept;
  l.nnz = kept;
  return l;
}

namespace {
bool kept_at(const TileLayout& l, uint64_t i) { return (l.bits[i >> 5] >> (i & 31)) & 1u; }
}  // namespace

void gather_reference(const TileLayout& l, size_t es, const void* src, void* compact) {
  uint64_t j = 0;
  for (uint64_t i = 0; i < l.count; ++i)
    if (kept_at(l, i))
      std::memcpy(static_cast<char*>(compact) + (j++) * es, static_cast<const char*>(src) + i * es, es);
}

void scatter_reference(const TileLayout& l, size_t es, const void* compact, void* dst) {
  uint64_t j = 0;
  for (uint64_t i = 0; i < l.count; ++i) {
    char* out = static_cast<char*>(dst) + i * es;
    if (kept_at(l, i)) std::memcpy(out, static_cast<const char*>(compact) + (j++) * es, es);
    else std::memset(out, 0, es);
  }
}

}  // namespace sieve::compress
