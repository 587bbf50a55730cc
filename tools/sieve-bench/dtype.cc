// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/dtype.h"

namespace sieve::bench {

std::optional<DType> parse_dtype(const std::string& text) {
  if (text == "fp32" || text == "float32" || text == "f32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

void sum_into(DType type, void* dst, const void* src, size_t count) {
  if (type == DType::kF32) {
    float* __restrict d = static_cast<float*>(dst);
    const float* __restrict s = static_cast<const float*>(src);
    for (size_t i = 0; i < count; ++i) d[i] += s[i];
    return;
  }
  uint16_t* __restrict d = static_cast<uint16_t*>(dst);
  const uint16_t* __restrict s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
}

}  // namespace sieve::bench
