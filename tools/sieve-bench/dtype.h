// Element types sieve-bench reduces, and their sums on the CPU (NCCL's ncclSum for fp32 and bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace sieve::bench {

enum class DType { F32, BF16 };

inline size_t dtype_bytes(DType type) { return type == DType::F32 ? 4 : 2; }
inline const char* dtype_name(DType type) { return type == DType::F32 ? "fp32" : "bf16"; }
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

// dst[i] += src[i] for `count` elements of `type`.
void sum_into(DType type, void* dst, const void* src, size_t count);

}  // namespace sieve::bench
