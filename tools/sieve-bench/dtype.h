// SPDX-License-Identifier: Apache-2.0
// Element types sieve-bench reduces (compress::DType's f32 and bf16, the only two parse_dtype
// admits), and their sums on the CPU (NCCL's ncclSum for fp32 and bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "compress/dtype.h"

namespace sieve::bench {

using compress::DType;

// --dtype's spelling (PyTorch's, "fp32" / "bf16"): what reports print and the Gloo peer is given.
inline const char* dtype_label(DType type) { return type == DType::kF32 ? "fp32" : "bf16"; }
// kF32 or kBF16; none for any other text (or type).
std::optional<DType> parse_dtype(const std::string& text);

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// Round to nearest even, as PyTorch and NCCL do (inputs here are never NaN).
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// dst[i] += src[i] for `count` elements of `type` (kF32 or kBF16).
void sum_into(DType type, void* dst, const void* src, size_t count);

}  // namespace sieve::bench
