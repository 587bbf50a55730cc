// SPDX-License-Identifier: Apache-2.0
// Element types of published buffers: one vocabulary for the C API's SIEVE_DTYPE_* codes, the mask
// registry and the collective proxy, so a mask is stored and read back with the dtype it was
// published with (two dtypes of one width are different dtypes).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI8, kU8, kI32, kI64 };
constexpr int kDTypeCount = 8;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kI8:
    case DType::kU8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t);

}  // namespace sieve::compress
