// SPDX-License-Identifier: Apache-2.0
// Deterministic message contents and sizes shared by both ends of a conformance transfer, so the
// receiver can check every byte without the sender telling it anything out of band.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sieve::conformance {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Message `index` of a stream seeded with `seed`: a keyed counter, 8 bytes at a time.
inline void fill_pattern(unsigned char* data, size_t size, uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed * 1000003 + index);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = mix64(key + i);
    std::memcpy(data + i, &word, 8);
  }
  if (i < size) {
    const uint64_t word = mix64(key + i);
    std::memcpy(data + i, &word, size - i);
  }
}

// Offset of the first byte that differs from the pattern, or `size` when all match.
inline size_t first_mismatch(const unsigned char* data, size_t size, uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed * 1000003 + index);
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t word = mix64(key + i);
    const size_t n = size - i < 8 ? size - i : 8;
    if (std::memcmp(data + i, &word, n) != 0) {
      for (size_t j = 0; j < n; ++j) {
        if (data[i + j] != reinterpret_cast<const unsigned char*>(&word)[j]) return i + j;
      }
    }
  }
  return size;
}

// Sparse message `index`: fp32 words of which about 80 % are zero, as pruned gradients look: groups
// of 16 words are zero together with probability 0.7 (pruned rows), the rest keep one word in three
// zero (ReLU-like scatter). Nonzero words are never 0, so the zero pattern is part of what is checked.
inline uint32_t sparse_word(uint64_t key, size_t word) {
  if (mix64(key ^ (word / 16) * 0x51ed27ull) % 10 < 7) return 0;
  const uint64_t h = mix64(key + word);
  return h % 3 == 0 ? 0 : static_cast<uint32_t>(h >> 32) | 1u;
}

inline void fill_sparse_pattern(unsigned char* data, size_t size, uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed * 1000003 + index);
  for (size_t i = 0; i < size; i += 4) {
    const uint32_t word = sparse_word(key, i / 4);
    std::memcpy(data + i, &word, size - i < 4 ? size - i : 4);
  }
}

inline size_t first_sparse_mismatch(const unsigned char* data, size_t size, uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed * 1000003 + index);
  for (size_t i = 0; i < size; i += 4) {
    const uint32_t word = sparse_word(key, i / 4);
    const size_t n = size - i < 4 ? size - i : 4;
    for (size_t j = 0; j < n; ++j) {
      if (data[i + j] != reinterpret_cast<const unsigned char*>(&word)[j]) return i + j;
    }
  }
  return size;
}

constexpr unsigned char kCanary = 0xA5;

// The size ladder from 0 B up: odd sizes on purpose (no alignment luck), up to 4 MiB.
constexpr size_t kLadder[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 4u << 20};
constexpr int kLadderSteps = sizeof(kLadder) / sizeof(kLadder[0]);
constexpr size_t kLadderMax = 4u << 20;
constexpr size_t kLargeSize = 64u << 20;  // the largest message: 64 MiB

// Receives are posted larger than the send on two steps out of three (the third posts exactly).
inline size_t posted_size(size_t sent, uint64_t index) { return index % 3 == 0 ? sent : sent + sent / 2 + 13; }

}  // namespace sieve::conformance
