// SPDX-License-Identifier: Apache-2.0
// The collectives whose counts Sieve changes: one enum for the collective proxy's calls, its dump,
// and what a collective's mask describes (every reduce-scatter or all-gather of a shape:
// compress/mask_registry.h). plugin/sieve.h's SIEVE_COLLECTIVE_* are its C spelling, mapped once at
// the C boundary (plugin/sieve_api.cc).
#pragma once

#include <cstdint>

namespace sieve::compress {

enum class Collective : uint8_t { kAllReduce, kReduceScatter, kAllGather };

// As NCCL names the call: "all_reduce", "reduce_scatter", "all_gather".
constexpr const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
  }
  return "?";
}

}  // namespace sieve::compress
