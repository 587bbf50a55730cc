// SPDX-License-Identifier: Apache-2.0
// Buffers shaped like masked gradients for the wire codec's benchmark and its tests: one generator,
// so that what the tests prove and what the benchmark measures are the same kind of data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace sieve::compress {

// `bytes` bytes of elements `element_size` bytes wide, each nonzero with probability `density` (a
// nonzero one is random, never all zero bits); a tail shorter than an element is random bytes.
inline std::vector<uint8_t> sparse_data(size_t bytes, size_t element_size, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(density);
  std::vector<uint8_t> data(bytes, 0);
  for (size_t i = 0; i + element_size <= bytes; i += element_size) {
    if (!keep(rng)) continue;
    uint64_t v;
    do v = rng();
    while ((v & ((uint64_t{1} << (8 * element_size)) - 1)) == 0);
    std::memcpy(&data[i], &v, element_size);
  }
  for (size_t i = bytes / element_size * element_size; i < bytes; ++i) data[i] = uint8_t(rng());
  return data;
}

}  // namespace sieve::compress
