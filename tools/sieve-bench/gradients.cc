// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/gradients.h"

#include <algorithm>
#include <cmath>

namespace sieve::bench {

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

float stored(DType type, const void* data, size_t i) {
  if (type == DType::kF32) return static_cast<const float*>(data)[i];
  return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
}

}  // namespace

GradientPattern::GradientPattern(int nranks, uint64_t iteration, DType type)
    : nranks_(std::max(1, nranks)),
      iteration_(iteration),
      magnitude_(type == DType::kF32
                     ? std::clamp<uint32_t>((1u << 24) / static_cast<uint32_t>(nranks_) - 1, 1, 1u << 22)
                     : static_cast<uint32_t>(std::clamp(255 / nranks_, 1, 64))),
      scale_(type == DType::kF32 ? std::ldexp(1.0f, -22) : std::ldexp(1.0f, -6)) {}

float GradientPattern::value(int rank, uint64_t index) const {
  const uint64_t h = mix(index * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(rank) << 48) ^ (iteration_ << 20));
  const int k = 1 + static_cast<int>((h & 0xffffffffu) % magnitude_);
  return static_cast<float>((h >> 32) & 1 ? -k : k) * scale_;
}

float GradientPattern::expected_sum(uint64_t index) const {
  float sum = 0;
  for (int rank = 0; rank < nranks_; ++rank) sum += value(rank, index);
  return sum;
}

void fill_gradients(const GradientPattern& pattern, int rank, uint64_t first, size_t count, DType type,
                    const uint8_t* keep, void* out) {
  for (size_t i = 0; i < count; ++i) {
    const float v = (keep == nullptr || keep[i]) ? pattern.value(rank, first + i) : 0.0f;
    if (type == DType::kF32) {
      static_cast<float*>(out)[i] = v;
    } else {
      static_cast<uint16_t*>(out)[i] = float_to_bf16(v);
    }
  }
}

namespace {

// Bitwise: a masked position must be +0.0 exactly, and every kept value is exact.
template <typename Expected> std::string compare(Expected expected_at, uint64_t first, size_t count, DType type,
                                                 const uint8_t* keep, const void* data) {
  size_t mismatches = 0;
  std::string first_report;
  for (size_t i = 0; i < count; ++i) {
    const float expected = (keep == nullptr || keep[i]) ? expected_at(first + i) : 0.0f;
    const float got = stored(type, data, i);
    if (std::signbit(got) != std::signbit(expected) || got != expected) {
      if (mismatches++ == 0) {
        first_report = "element " + std::to_string(first + i) + ": got " + std::to_string(got) + ", expected " +
                       std::to_string(expected);
      }
    }
  }
  if (mismatches == 0) return "";
  return std::to_string(mismatches) + " wrong elements, first " + first_report;
}

}  // namespace

std::string check_sums(const GradientPattern& pattern, uint64_t first, size_t count, DType type, const uint8_t* keep,
                       const void* data) {
  return compare([&](uint64_t index) { return pattern.expected_sum(index); }, first, count, type, keep, data);
}

std::string check_values(const GradientPattern& pattern, int owner, uint64_t first, size_t count, DType type,
                         const uint8_t* keep, const void* data) {
  return compare([&](uint64_t index) { return pattern.value(owner, index); }, first, count, type, keep, data);
}

}  // namespace sieve::bench
