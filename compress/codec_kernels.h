// SPDX-License-Identifier: Apache-2.0
// Internal: the per-ISA inner loops of the codec. Each kernel handles a prefix of whole blocks and
// returns how many words it did; the scalar kernels finish from there. Blocks are multiples of 8
// words, so a kernel always stops on a bitmap byte boundary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress::detail {

struct EncodeCursor {
  const uint8_t* src;    // word 0
  size_t words;          // words to encode
  uint8_t* bitmap;       // ceil(words / 8) bytes
  uint8_t* payload;      // packed nonzero words start here
  uint8_t* out;          // next payload byte to write
  const uint8_t* limit;  // writes must stay below this (the destination's end)
  size_t budget;         // payload bytes allowed before the frame stops paying
  size_t done;           // words encoded so far
};

struct DecodeCursor {
  const uint8_t* bitmap;
  const uint8_t* in;      // next packed word
  const uint8_t* in_end;  // reads must stay below this (the input's end)
  uint8_t* dst;           // word 0
  size_t words;
  size_t done;
};

// Encoders return false when the payload exceeded the budget (the caller writes a raw frame).
bool encode_scalar(EncodeCursor& c, unsigned word_size);
void decode_scalar(DecodeCursor& c, unsigned word_size);

// Set bits in bitmap[0, bytes): portable, and with the popcnt instruction (AVX2 machines have it).
uint64_t popcount_scalar(const uint8_t* bytes, size_t n);
uint64_t popcount_fast(const uint8_t* bytes, size_t n);

bool encode_avx2(EncodeCursor& c, unsigned word_size);
void decode_avx2(DecodeCursor& c, unsigned word_size);
bool encode_avx512(EncodeCursor& c, unsigned word_size);
void decode_avx512(DecodeCursor& c, unsigned word_size);

}  // namespace sieve::compress::detail
