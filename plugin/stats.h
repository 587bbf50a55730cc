// SPDX-License-Identifier: Apache-2.0
// Process-wide counters behind sieve_stats_get(). Process-wide on purpose: the C API has no handle,
// and a trainer asks "what did this process send". The net plugin face adds traffic as requests
// complete; the collective proxy adds collective counts. Relaxed atomics: counters, not sync.
#pragma once

#include <atomic>
#include <cstdint>

namespace sieve::plugin {

struct ProcessStats {
  std::atomic<uint64_t> bytes_logical_sent{0};  // what NCCL handed to isend
  std::atomic<uint64_t> bytes_wire_sent{0};     // what left through the sockets (headers included)
  std::atomic<uint64_t> bytes_logical_received{0};
  std::atomic<uint64_t> bytes_wire_received{0};
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> collectives_dense{0};       // proxy: passed through unchanged
  std::atomic<uint64_t> collectives_compacted{0};   // proxy: ran on the mask-compacted buffer
  std::atomic<uint64_t> mask_violations{0};         // nonzero values found outside a mask
  std::atomic<uint64_t> tables_activated{0};        // proxy: committed tables a communicator agreed on
  std::atomic<uint64_t> tables_refused{0};          // proxy: committed tables a communicator did not agree on
  std::atomic<uint64_t> connections_rejected{0};    // stray / bad-magic / bad-token connections dropped
  std::atomic<uint64_t> learned_calls_observed{0};  // proxy: all-reduces SIEVE_TRACK watched
  std::atomic<uint64_t> learned_bytes_saved{0};  // proxy: bytes learned masks kept off the wire (observe: would have)
  std::atomic<uint64_t> learned_pattern_changes{0};     // proxy: stable patterns that changed
  std::atomic<uint64_t> learned_signatures_retired{0};  // proxy: learned masks that kept falling back
};

ProcessStats& process_stats();

inline void add(std::atomic<uint64_t>& counter, uint64_t amount) {
  counter.fetch_add(amount, std::memory_order_relaxed);
}

}  // namespace sieve::plugin
