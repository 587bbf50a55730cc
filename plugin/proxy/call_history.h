// SPDX-License-Identifier: Apache-2.0
// Hang forensics: the last collectives each communicator issued, readable from another thread while
// the communicator is stuck. Two ranks' dumps side by side show where their sequences diverged (the
// question every NCCL hang starts with: "which rank, and at which call?").
//
// Written only by the thread that drives the communicator (NCCL allows one at a time), read by a
// dump at any time: every field is an atomic word, and a record whose sequence number changed while
// it was read is skipped, so a dump never blocks the communicator and never waits for it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plugin/proxy/types.h"

namespace sieve::plugin::proxy {

// What a call did, as the dump names it: one of the collectives (compress::Collective's values, so a
// collective's kind is its Collective without a mapping) or one of the proxy's own agreements.
enum class CallKind : uint8_t {
  kAllReduce = uint8_t(Collective::kAllReduce),
  kReduceScatter = uint8_t(Collective::kReduceScatter),
  kAllGather = uint8_t(Collective::kAllGather),
  kCommit,
  kVote,
  kVerifyVerdict
};
constexpr CallKind call_kind(Collective collective) { return CallKind(uint8_t(collective)); }
enum class CallPath : uint8_t { kDense, kCompactPublished, kCompactLearned, kAgreement };

struct CallRecord {
  uint64_t seq = 0;  // 1 for the communicator's first call seen by the proxy
  CallKind kind = CallKind::kAllReduce;
  ReduceOp op = ReduceOp::kOther;
  std::optional<DType> type;  // none: a type the proxy passes through
  CallPath path = CallPath::kDense;
  uint64_t count = 0;  // elements NCCL moved for this call (the compacted count when compacted)
  uint64_t table = 0;  // the agreed table's hash in force (0: none)
};

class CallHistory {
 public:
  static constexpr size_t kDepth = 16;
  // Numbers the record (the communicator's next sequence number) and keeps it; returns the number.
  uint64_t add(CallRecord record);
  // Up to kDepth records, oldest first.
  std::vector<CallRecord> recent() const;
  uint64_t last_seq() const { return last_seq_.load(std::memory_order_acquire); }

 private:
  struct Slot {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> shape{0};  // kind, op, type, path packed
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> table{0};
  };
  std::array<Slot, kDepth> slots_;
  std::atomic<uint64_t> last_seq_{0};
};

// "all_reduce sum f32 x 1048576 compact(published) table 5e1f..."
std::string describe(const CallRecord& record);

}  // namespace sieve::plugin::proxy
