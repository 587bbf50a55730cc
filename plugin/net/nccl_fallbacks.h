// SPDX-License-Identifier: Apache-2.0
// The NCCL variables Sieve reads, never writes: where a SIEVE_IB_* variable of the same meaning is
// unset, NCCL's decides (kIbTwins lists them), so a cluster already tuned for NCCL's own IB
// transport (its NICs, its GID, its lossless class, its partition, its retry budget, relaxed
// ordering or adaptive routing set for its platform and fabric) puts Sieve's verbs traffic there
// too, instead of Sieve's own choice (another NIC, another GID) that could hang at connect.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/transport.h"
#include "plugin/config.h"

namespace sieve::plugin {

// getenv, or a map in tests.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// `sieve_value` when it is set (>= 0, the registry's default is -1), else the integer NCCL would
// read from `nccl_name` (decimal, or hex with 0x, as NCCL parses it) when that lies in
// [lo, hi], else `fallback`. An NCCL value that does not parse or lies outside [lo, hi] is warned,
// naming it, and ignored, as NCCL's own IB transport would refuse it.
int64_t sieve_or_nccl(int64_t sieve_value, const char* nccl_name, int64_t lo, int64_t hi, int64_t fallback,
                      const EnvironmentLookup& environment);

// Which variable decided a verbs setting that has an NCCL twin.
enum class Origin { kSieve, kNccl, kDefault };
const char* origin_name(Origin origin);  // "sieve", "nccl", "default"

struct SharedSetting {
  const char* sieve_name;  // "SIEVE_IB_TC"
  const char* nccl_name;   // "NCCL_IB_TC"
  std::string value;       // the value in force, as text ("" for an empty string, "auto" for -1)
  Origin origin;
};

// Fills the verbs options that have an NCCL twin into `o`: the SIEVE_IB_* variable when it is set
// in the environment (and, for those whose -1 means "decide elsewhere", not -1), else the NCCL
// variable when it is set and valid, else Sieve's default. Returns what decided each, in registry
// order, for sieve-info and the log. NCCL values Sieve cannot take are warned and ignored, except
// NCCL_IB_QPS_PER_CONNECTION above Sieve's 16, which is lowered to 16.
std::vector<SharedSetting> resolve_ib_options(const config::Registry& registry, const EnvironmentLookup& environment,
                                              net::TransportOptions* o);

}  // namespace sieve::plugin
