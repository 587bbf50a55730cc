// SPDX-License-Identifier: Apache-2.0
// The collective proxy's own vocabulary, free of NCCL and CUDA so that its host logic builds and is
// tested on machines without either. The CUDA backend maps these to ncclDataType_t / ncclRedOp_t.
// Element types are compress::DType, the one enum of the C API, the mask registry and the proxy: a
// collective's type is compared with a published mask's as is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/collective.h"
#include "compress/dtype.h"

namespace sieve::plugin::proxy {

using compress::Collective;
using compress::DType;
// Reductions the proxy compacts (masked positions are zero on every rank, so each of these gives
// zero there too): NCCL's built-in ones, and the pre-multiplied sums a trainer created on a
// communicator (ncclRedOpCreatePreMulSum: every input scaled, then summed; FSDP's bf16 and averaged
// reduces), which carry NCCL's handle. kOther (any other op) passes through dense.
enum class ReduceOp : int32_t { kSum, kProd, kMax, kMin, kAvg, kOther };
constexpr int32_t kPreMulSumBase = 1 << 16;
inline ReduceOp premul_sum(int32_t handle) { return ReduceOp(kPreMulSumBase + handle); }
inline bool is_premul_sum(ReduceOp op) { return int32_t(op) >= kPreMulSumBase; }
inline int32_t premul_handle(ReduceOp op) { return int32_t(op) - kPreMulSumBase; }

// True for the types the proxy compacts: the floating ones. The interposed entry points hand the
// proxy those and int64 (the commit token's type, never compacted); NCCL's other types pass through
// to NCCL untouched.
bool compactable(DType type);
// One element as a double (f16 and bf16 widened exactly), for SIEVE_PROXY_VERIFY's comparison.
double element_value(DType type, const void* element);
const char* reduce_op_name(ReduceOp op);

// Opaque handles the proxy only compares and hands back to the backend.
using Comm = const void*;
using Stream = void*;
// The registry scope of masks published for one communicator (sieve_mask_publish_for): its handle.
inline uint64_t comm_scope(Comm comm) { return uint64_t(reinterpret_cast<uintptr_t>(comm)); }

// The violation flag that travels as one extra element of a learned-mask compact buffer. Learned
// masks serve sum and avg only (for max, min and prod a zero output does not mean zero inputs), so
// each rank writes 0 (its input is zero wherever the mask prunes) or 1, and the reduced flag is
// nonzero iff some rank had a nonzero there.
struct FlagEncoding {
  uint64_t ok_bits = 0;
  uint64_t bad_bits = 0;
};
FlagEncoding flag_encoding(DType type);
bool flag_reports_violation(DType type, uint64_t reduced_bits);

}  // namespace sieve::plugin::proxy
