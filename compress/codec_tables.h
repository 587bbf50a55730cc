// SPDX-License-Identifier: Apache-2.0
// Internal: shuffle tables for the AVX2 paths, built at compile time. Index = one bitmap byte
// (8 words, bit i set = word i nonzero).
#pragma once

#include <cstdint>

namespace sieve::compress::detail {

struct ShuffleTables {
  // vpermd indices that move the nonzero 32-bit lanes to the front, in order.
  alignas(32) uint32_t compress32[256][8] = {};
  // vpermd indices that send packed lane r back to its word; pruned lanes are cleared by lane_mask32.
  alignas(32) uint32_t expand32[256][8] = {};
  alignas(32) uint32_t lane_mask32[256][8] = {};
  // pshufb byte indices for eight 16-bit words (0x80 writes a zero byte).
  alignas(16) uint8_t compress16[256][16] = {};
  alignas(16) uint8_t expand16[256][16] = {};

  constexpr ShuffleTables() {
    for (unsigned m = 0; m < 256; ++m) {
      unsigned packed = 0;
      for (unsigned i = 0; i < 16; ++i) compress16[m][i] = expand16[m][i] = 0x80;
      for (unsigned i = 0; i < 8; ++i) {
        if (!((m >> i) & 1)) continue;
        compress32[m][packed] = i;
        expand32[m][i] = packed;
        lane_mask32[m][i] = 0xFFFFFFFFu;
        compress16[m][2 * packed] = uint8_t(2 * i);
        compress16[m][2 * packed + 1] = uint8_t(2 * i + 1);
        expand16[m][2 * i] = uint8_t(2 * packed);
        expand16[m][2 * i + 1] = uint8_t(2 * packed + 1);
        ++packed;
      }
    }
  }
};

inline constexpr ShuffleTables kShuffleTables{};

}  // namespace sieve::compress::detail
