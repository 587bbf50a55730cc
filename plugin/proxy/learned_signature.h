// Learned masks (SIEVE_TRACK=1) for one collective signature: a communicator, an element count and
// an element type, all-reduced with sum or avg. Keyed by signature, never by address: the k-th call
// of a signature is the same logical call on every rank whatever the allocators did, so everything
// below is a function of the sequence of collectives and of their outputs, identical on every rank.
//
// Every dense call records the nonzero pattern of its output on the device; the host reads the record
// of the call `lag` calls earlier, never a newer one (it may have to wait for it, never for longer than
// that call takes). After `stable` identical patterns the mask is proposed, and the ranks vote on it
// (agreement.h): with a unanimous verdict the signature compacts from then on. A compact call carries
// one more element, each rank's violation flag (its input was nonzero where the mask prunes), reduced
// with the call itself; a flag read at the same lag that reports a violation sends every rank back to
// dense at the same call. A refused proposal backs off before the next one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/mask_tracker.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/entry_plan.h"

namespace sieve::plugin::proxy {

struct LearnedDecision {
  bool compact = false;        // run this call compact on plan()
  bool propose = false;        // a stable mask awaits a vote (prepare_proposal, then settle)
  bool fell_back = false;      // a reduced flag reported a violation: dense again, relearning
  uint64_t violations = 0;     // this rank's nonzeros dropped, read from an older call's record
  size_t record = 0;           // where this call leaves its record
};

class LearnedSignature {
 public:
  LearnedSignature(uint64_t count, ElemType type, uint32_t stable_after, uint32_t lag, const PlanRules& rules);

  // At the start of a call (never during graph capture): reads the record of the call `lag` calls
  // ago and decides this call's mode.
  int begin_call(DeviceBackend& backend, Comm comm, LearnedDecision* decision);

  // The proposal's address-free hash, and its plan (false, with *why, when this rank cannot build it).
  uint64_t proposal_hash() const;
  bool prepare_proposal(DeviceBackend& backend, std::string* why);
  // The verdict on the proposal: compact from the next call, or relearn after a back-off.
  void settle(bool unanimous);
  // The vote never happened (its group was only simulated): propose again at the next stable read.
  void withdraw();

  const std::shared_ptr<EntryPlan>& plan() const { return plan_; }
  bool compact() const { return static_cast<bool>(plan_); }
  bool proposing() const { return static_cast<bool>(proposal_); }

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
  int consume(DeviceBackend& backend, Comm comm, Record& record, LearnedDecision* decision);

  const uint64_t count_;
  const ElemType type_;
  const PlanRules rules_;
  const uint32_t stable_after_;
  compress::MaskTracker tracker_;
  std::vector<Record> ring_;            // the records of the last `lag` calls
  std::shared_ptr<const compress::Mask> proposal_;
  std::shared_ptr<EntryPlan> prepared_;  // the proposal's plan, while the vote is pending
  std::shared_ptr<EntryPlan> plan_;      // non-null while compact
  uint64_t calls_ = 0;
  uint64_t quiet_until_ = 0;  // after a refused proposal, records before this call are not observed
  uint32_t refusals_ = 0;
};

}  // namespace sieve::plugin::proxy
