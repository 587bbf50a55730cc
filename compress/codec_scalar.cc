// SPDX-License-Identifier: Apache-2.0
// The portable codec loops: the reference the SIMD paths must match bit for bit, and the finish
// of every path (the last words past the final whole SIMD block).
#include <cstring>

#include "compress/codec_kernels.h"

namespace sieve::compress::detail {
namespace {

template <typename Word> bool encode_words(EncodeCursor& c) {
  uint8_t* out = c.out;
  for (size_t i = c.done; i < c.words; i += 8) {
    if (size_t(out - c.payload) > c.budget) {
      c.out = out;
      return false;
    }
    const size_t n = c.words - i < 8 ? c.words - i : 8;
    const bool room = out + 8 * sizeof(Word) <= c.limit;
    unsigned byte = 0;
    for (size_t k = 0; k < n; ++k) {
      Word w;
      std::memcpy(&w, c.src + (i + k) * sizeof(Word), sizeof w);
      const unsigned nonzero = w != 0;
      byte |= nonzero << k;
      // Branch-free where the destination has room: store always, advance only past nonzeros.
      if (room || nonzero) std::memcpy(out, &w, sizeof w);
      out += nonzero * sizeof w;
    }
    c.bitmap[i / 8] = uint8_t(byte);
  }
  c.out = out;
  c.done = c.words;
  return true;
}

template <typename Word> void decode_words(DecodeCursor& c) {
  const uint8_t* in = c.in;
  for (size_t i = c.done; i < c.words; i += 8) {
    const size_t n = c.words - i < 8 ? c.words - i : 8;
    const unsigned byte = c.bitmap[i / 8];
    if (in + 8 * sizeof(Word) <= c.in_end) {
      // Branch-free: always read the next packed word, keep it only where the bitmap says so.
      for (size_t k = 0; k < n; ++k) {
        const unsigned nonzero = (byte >> k) & 1;
        Word w;
        std::memcpy(&w, in, sizeof w);
        w = Word(w & Word(0 - Word(nonzero)));
        std::memcpy(c.dst + (i + k) * sizeof(Word), &w, sizeof w);
        in += nonzero * sizeof w;
      }
      continue;
    }
    for (size_t k = 0; k < n; ++k) {  // near the end of the input: read only what exists
      Word w = 0;
      if ((byte >> k) & 1) {
        std::memcpy(&w, in, sizeof w);
        in += sizeof w;
      }
      std::memcpy(c.dst + (i + k) * sizeof(Word), &w, sizeof w);
    }
  }
  c.in = in;
  c.done = c.words;
}

}  // namespace

bool encode_scalar(EncodeCursor& c, unsigned word_size) {
  return word_size == 4 ? encode_words<uint32_t>(c) : encode_words<uint16_t>(c);
}

void decode_scalar(DecodeCursor& c, unsigned word_size) {
  if (word_size == 4) decode_words<uint32_t>(c);
  else decode_words<uint16_t>(c);
}

uint64_t popcount_scalar(const uint8_t* bytes, size_t n) {
  uint64_t total = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, sizeof w);
    total += uint64_t(__builtin_popcountll(w));
  }
  for (; i < n; ++i) total += uint64_t(__builtin_popcount(bytes[i]));
  return total;
}

}  // namespace sieve::compress::detail
