// The few NCCL variables Sieve reads, never writes: where a SIEVE_IB_* variable of the same meaning
// is unset, NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_PKEY, NCCL_IB_PCI_RELAXED_ORDERING and
// NCCL_IB_ADAPTIVE_ROUTING decide, so a cluster already tuned for NCCL's own IB transport (its
// lossless class, its partition, relaxed ordering or adaptive routing set for its platform and
// fabric) puts Sieve's verbs traffic there too.
#pragma once

#include <cstdint>
#include <functional>

namespace sieve::plugin {

// getenv, or a map in tests.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// `sieve_value` when it is set (>= 0, the registry's default is -1), else the integer NCCL would
// read from `nccl_name` (decimal, or hex with 0x, as NCCL parses it) when that lies in
// [lo, hi], else `fallback`. An NCCL value that does not parse or lies outside [lo, hi] is warned,
// naming it, and ignored, as NCCL's own IB transport would refuse it.
int64_t sieve_or_nccl(int64_t sieve_value, const char* nccl_name, int64_t lo, int64_t hi, int64_t fallback,
                      const EnvironmentLookup& environment);

}  // namespace sieve::plugin
