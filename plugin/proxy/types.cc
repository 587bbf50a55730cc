#include "plugin/proxy/types.h"

#include <cmath>
#include <cstring>

namespace sieve::plugin::proxy {

size_t element_size(ElemType type) {
  switch (type) {
    case ElemType::kF32: return 4;
    case ElemType::kF16: return 2;
    case ElemType::kBF16: return 2;
    case ElemType::kF64: return 8;
    case ElemType::kI64: return 8;
    case ElemType::kOther: return 0;
  }
  return 0;
}

bool compactable(ElemType type) { return type != ElemType::kI64 && type != ElemType::kOther; }

double element_value(ElemType type, const void* element) {
  uint64_t bits = 0;
  std::memcpy(&bits, element, element_size(type));
  switch (type) {
    case ElemType::kF32: {
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ElemType::kF64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case ElemType::kBF16: {  // the top half of an f32
      const uint32_t wide = uint32_t(bits) << 16;
      float f;
      std::memcpy(&f, &wide, 4);
      return f;
    }
    case ElemType::kF16: {
      const int sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
      double v;
      if (exponent == 0) v = std::ldexp(double(fraction), -24);  // zero and subnormals
      else if (exponent == 31) v = fraction ? std::nan("") : HUGE_VAL;
      else v = std::ldexp(double(fraction | 0x400), exponent - 25);
      return sign ? -v : v;
    }
    case ElemType::kI64: return double(int64_t(bits));
    case ElemType::kOther: return 0;
  }
  return 0;
}

const char* elem_type_name(ElemType type) {
  switch (type) {
    case ElemType::kF32: return "f32";
    case ElemType::kF16: return "f16";
    case ElemType::kBF16: return "bf16";
    case ElemType::kF64: return "f64";
    case ElemType::kI64: return "i64";
    case ElemType::kOther: return "other";
  }
  return "other";
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

std::optional<compress::DType> published_dtype(ElemType type) {
  switch (type) {
    case ElemType::kF32: return compress::DType::kF32;
    case ElemType::kF16: return compress::DType::kF16;
    case ElemType::kBF16: return compress::DType::kBF16;
    case ElemType::kF64: return compress::DType::kF64;
    case ElemType::kI64: return std::nullopt;
    case ElemType::kOther: return std::nullopt;
  }
  return std::nullopt;
}

namespace {

// IEEE bit pattern of +1 in each type.
uint64_t one_bits(ElemType type) {
  switch (type) {
    case ElemType::kF32: return 0x3F800000ull;
    case ElemType::kF16: return 0x3C00ull;
    case ElemType::kBF16: return 0x3F80ull;
    case ElemType::kF64: return 0x3FF0000000000000ull;
    case ElemType::kI64: return 0;
    case ElemType::kOther: return 0;
  }
  return 0;
}

uint64_t sign_bit(ElemType type) { return element_size(type) ? 1ull << (element_size(type) * 8 - 1) : 0; }

}  // namespace

FlagEncoding flag_encoding(ElemType type) { return FlagEncoding{0, one_bits(type)}; }

bool flag_reports_violation(ElemType type, uint64_t reduced_bits) {
  const size_t bits = element_size(type) * 8;
  const uint64_t value_mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
  return (reduced_bits & value_mask & ~sign_bit(type)) != 0;
}

}  // namespace sieve::plugin::proxy
