// SPDX-License-Identifier: Apache-2.0
// Internal: the block loop every SIMD codec runs, written once. An instruction set supplies a Kernel:
//   kWords      words in one block (a multiple of 8, so a block ends on a bitmap byte boundary)
//   kWordBytes  bytes per word (4 or 2)
//   kReach      bytes one block's stores may touch past out (encode) or its loads past in (decode)
//   encode(src, bitmap, out) -> payload bytes written; decode(bitmap, in, dst) -> payload bytes read
// The loop keeps the cursor, the bounds and the budget; the kernel only packs or expands one block.
// Kernel functions carry their instruction set's target attribute, and so does the function that
// calls encode_blocks / decode_blocks, with SIEVE_INLINE_KERNEL: the loop itself has no target, so
// without flatten GCC keeps the kernel a call per block (a template cannot take the attribute from
// its parameter, and always_inline on the kernel is an error in a loop compiled for baseline x86-64).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/codec_kernels.h"

#define SIEVE_INLINE_KERNEL __attribute__((flatten))

namespace sieve::compress::detail {

// Encodes whole blocks from c.done while their stores stay below c.limit; false once the payload
// has passed c.budget (the caller then writes a raw frame).
template <typename Kernel> inline bool encode_blocks(EncodeCursor& c) {
  uint8_t* out = c.out;
  size_t b = c.done / Kernel::kWords;
  for (const size_t blocks = c.words / Kernel::kWords; b < blocks; ++b) {
    if (out + Kernel::kReach > c.limit) break;
    if (size_t(out - c.payload) > c.budget) {
      c.out = out;
      return false;
    }
    out += Kernel::encode(c.src + b * Kernel::kWords * Kernel::kWordBytes, c.bitmap + b * (Kernel::kWords / 8), out);
  }
  c.out = out;
  c.done = b * Kernel::kWords;
  return true;
}

// Decodes whole blocks from c.done while their loads stay below c.in_end.
template <typename Kernel> inline void decode_blocks(DecodeCursor& c) {
  const uint8_t* in = c.in;
  size_t b = c.done / Kernel::kWords;
  for (const size_t blocks = c.words / Kernel::kWords; b < blocks; ++b) {
    if (in + Kernel::kReach > c.in_end) break;
    in += Kernel::decode(c.bitmap + b * (Kernel::kWords / 8), in, c.dst + b * Kernel::kWords * Kernel::kWordBytes);
  }
  c.in = in;
  c.done = b * Kernel::kWords;
}

}  // namespace sieve::compress::detail
