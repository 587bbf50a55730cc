// SPDX-License-Identifier: Apache-2.0
// Learned masks (SIEVE_TRACK) for one collective signature: a communicator, an element count and an
// element type, all-reduced with sum or avg. The signature is what every rank sees identically (the
// k-th call of a signature is the same logical call on every rank whatever the allocators did), so
// when to propose, and what, follows from the sequence of collectives and their outputs only.
//
// Every dense call records the nonzero pattern of its output on the device; the host reads the record
// of the call `lag` calls earlier, never a newer one. After `stable` identical patterns the mask is
// proposed and the ranks vote on it (agreement.h). A rank votes yes only if every call of the window
// came from one buffer on that rank: the mask is then bound, on each rank, to that buffer. A compact
// call carries one more element, each rank's violation flag (its input was nonzero where the mask
// prunes, or the call came from another buffer than the bound one), reduced with the call itself; a
// flag read at the same lag that reports a violation sends every rank back to dense at the same call.
// What that costs is exact and stated in docs/DESIGN.md: the values outside the mask in the calls
// from the violating one to the switch (at most `lag` calls) are dropped on every rank, and counted.
//
// Observe mode runs the same records and tracker but never compacts and never votes (it issues no
// collective): it only counts what compaction would have saved and how often the pattern changed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/mask_tracker.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/entry_plan.h"

namespace sieve::plugin::proxy {

struct LearnedRules {
  uint32_t stable = 3;  // SIEVE_TRACK_STABLE
  uint32_t lag = 2;     // SIEVE_TRACK_LAG
  PlanRules plan;
  bool observe = false;  // SIEVE_TRACK=observe
  bool verify = false;   // SIEVE_PROXY_VERIFY
};

struct LearnedDecision {
  bool compact = false;          // run this call compact on plan()
  bool moved = false;            // compact, but not on the bound buffer: the flag reports it
  bool propose = false;          // a stable mask awaits a vote (prepare_proposal, then settle)
  bool fell_back = false;        // a reduced flag reported a violation: dense again, relearning
  bool pattern_changed = false;  // observe: a stable pattern changed (compaction would have fallen back)
  bool retired = false;          // this fallback was one too many: the signature is never learned again
  uint64_t violations = 0;       // this rank's nonzeros dropped, read from an older call's record
  uint64_t would_save = 0;       // observe: bytes a compact call would not have sent
  size_t record = 0;             // where this call leaves its record
};

class LearnedSignature {
 public:
  LearnedSignature(uint64_t count, DType type, const LearnedRules& rules);

  // At the start of a call (never during graph capture): reads the record of the call `lag` calls
  // ago and decides this call's mode. `send` is this call's input buffer (this rank's own business:
  // it only ever enters the vote's yes/no and the violation flag).
  int begin_call(DeviceBackend& backend, Comm comm, CommLiveness& live, const void* send, LearnedDecision* decision);

  // The proposal's address-free hash, and its plan (false, with *why, when this rank cannot build it
  // or the window's calls came from more than one buffer here).
  uint64_t proposal_hash() const;
  bool prepare_proposal(DeviceBackend& backend, std::string* why);
  // The verdict on the proposal: compact from the next call, or relearn after a back-off.
  void settle(bool unanimous);
  // The vote never happened (its group was only simulated, or captured): propose again later.
  void withdraw();

  const std::shared_ptr<EntryPlan>& plan() const { return plan_; }
  // Fell back kMaxFallbacks times: its pattern does not hold, so it runs dense, unrecorded, for good.
  bool retired() const { return retired_; }
  static constexpr uint32_t kMaxFallbacks = 4;
  uint64_t count() const { return count_; }
  DType type() const { return type_; }

  // After the call's collective is enqueued: leaves this call's record.
  int record_dense(DeviceBackend& backend, size_t record, const void* output, Stream stream);
  int record_compact(DeviceBackend& backend, size_t record, const std::shared_ptr<EntryPlan>& plan, Stream stream);

 private:
  struct Record {
    bool issued = false;
    bool compact = false;
    std::shared_ptr<EntryPlan> plan;  // the plan the compact call ran on (kept alive until read)
    std::unique_ptr<LagSlot> slot;
  };
  int consume(DeviceBackend& backend, Comm comm, CommLiveness& live, Record& record, LearnedDecision* decision);
  void observe_only(const compress::TrackUpdate& update, LearnedDecision* decision);

  const uint64_t count_;
  const DType type_;
  const LearnedRules rules_;
  compress::MaskTracker tracker_;
  std::vector<Record> ring_;  // the records of the last `lag` calls
  // Compact calls' flags that a later compact record found unread in their slot: read with it.
  struct Spilled {
    size_t index;
    Record record;
  };
  std::vector<Spilled> spilled_;
  compress::Mask nonzero_;  // the record being read (its storage reused from call to call)
  std::shared_ptr<const compress::Mask> proposal_;
  std::shared_ptr<EntryPlan> prepared_;  // the proposal's plan, while the vote is pending
  std::shared_ptr<EntryPlan> plan_;      // non-null while compact
  const void* bound_ = nullptr;          // the buffer plan_ was learned on, on this rank
  const void* last_send_ = nullptr;
  uint64_t calls_at_address_ = 0;  // consecutive calls from last_send_, this one included
  uint64_t calls_ = 0;
  uint64_t quiet_until_ = 0;  // after a refused proposal, records before this call are not observed
  uint32_t refusals_ = 0;
  // Fallbacks (a reduced flag reported a violation): each doubles the quiet time before the pattern
  // is observed again, the last retires the signature. Read from the reduced flag and this
  // signature's call count only, so every rank backs off and retires at the same call.
  uint32_t fallbacks_ = 0;
  bool retired_ = false;
};

}  // namespace sieve::plugin::proxy
