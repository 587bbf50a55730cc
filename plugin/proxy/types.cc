// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/types.h"

#include <cmath>
#include <cstring>

namespace sieve::plugin::proxy {

bool compactable(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64: return true;
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: return false;
  }
  return false;
}

double element_value(DType type, const void* element) {
  uint64_t bits = 0;
  std::memcpy(&bits, element, compress::dtype_size(type));
  switch (type) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case DType::kBF16: {  // the top half of an f32
      const uint32_t wide = uint32_t(bits) << 16;
      float f;
      std::memcpy(&f, &wide, 4);
      return f;
    }
    case DType::kF16: {
      const int sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
      double v;
      if (exponent == 0) v = std::ldexp(double(fraction), -24);  // zero and subnormals
      else if (exponent == 31) v = fraction ? std::nan("") : HUGE_VAL;
      else v = std::ldexp(double(fraction | 0x400), exponent - 25);
      return sign ? -v : v;
    }
    case DType::kI8: return double(int8_t(bits));
    case DType::kU8: return double(uint8_t(bits));
    case DType::kI32: return double(int32_t(bits));
    case DType::kI64: return double(int64_t(bits));
  }
  return 0;
}

const char* reduce_op_name(ReduceOp op) {
  if (is_premul_sum(op)) return "premulsum";
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kOther: return "other";
  }
  return "other";
}

namespace {

// IEEE bit pattern of +1 in each type.
uint64_t one_bits(DType type) {
  switch (type) {
    case DType::kF32: return 0x3F800000ull;
    case DType::kF16: return 0x3C00ull;
    case DType::kBF16: return 0x3F80ull;
    case DType::kF64: return 0x3FF0000000000000ull;
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: return 0;  // never compacted: no flag
  }
  return 0;
}

uint64_t sign_bit(DType type) { return 1ull << (compress::dtype_size(type) * 8 - 1); }

}  // namespace

FlagEncoding flag_encoding(DType type) { return FlagEncoding{0, one_bits(type)}; }

bool flag_reports_violation(DType type, uint64_t reduced_bits) {
  const size_t bits = compress::dtype_size(type) * 8;
  const uint64_t value_mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
  return (reduced_bits & value_mask & ~sign_bit(type)) != 0;
}

}  // namespace sieve::plugin::proxy
