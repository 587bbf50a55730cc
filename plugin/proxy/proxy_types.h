// The collective proxy's own vocabulary, free of NCCL and CUDA so that its host logic builds and is
// tested on machines without either. The CUDA backend maps these to ncclDataType_t / ncclRedOp_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace sieve::plugin::proxy {

// Element types the proxy compacts; everything else passes through dense.
enum class ElemType { kF32, kF16, kBF16, kF64, kOther };
// Reductions the proxy compacts (masked positions are zero on every rank, so each of these gives
// zero there too); kOther (NCCL's PreMulSum and user-created ops) passes through dense.
enum class ReduceOp { kSum, kProd, kMax, kMin, kAvg, kOther };

size_t element_size(ElemType type);
const char* elem_type_name(ElemType type);
const char* reduce_op_name(ReduceOp op);

// Opaque handles the proxy only compares and hands back to the backend.
using Comm = const void*;
using Stream = void*;

// Identifies one buffer as a collective sees it. Plans and learned masks are cached per key.
struct BufferKey {
  Comm comm = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  ElemType type = ElemType::kOther;
  bool operator==(const BufferKey& o) const {
    return comm == o.comm && send == o.send && recv == o.recv && count == o.count && type == o.type;
  }
};

struct BufferKeyHash {
  size_t operator()(const BufferKey& k) const {
    size_t h = std::hash<const void*>()(k.comm);
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(std::hash<const void*>()(k.send));
    mix(std::hash<const void*>()(k.recv));
    mix(std::hash<uint64_t>()(k.count));
    mix(size_t(k.type));
    return h;
  }
};

// Bits of the violation flag that travels as one extra element of a learned-mask compact buffer.
// Chosen per reduction so that the reduced flag says "some rank saw a violation" for every op:
// sum/avg/max of {0, 1} and min of {0, -1} are nonzero iff any rank wrote the bad value; prod of
// {1, 0} is zero iff any rank wrote 0.
struct FlagEncoding {
  uint64_t ok_bits = 0;
  uint64_t bad_bits = 0;
  bool violation_when_zero = false;  // prod
};
FlagEncoding flag_encoding(ElemType type, ReduceOp op);
// True when the reduced flag's bits say some rank had a nonzero outside the mask.
bool flag_reports_violation(const FlagEncoding& encoding, ElemType type, uint64_t reduced_bits);

}  // namespace sieve::plugin::proxy
