// Learned-mask state of one buffer (SIEVE_TRACK=1). Every call on the buffer leaves a record on the
// device (the nonzero pattern of the all-reduce output while dense; the reduced violation flag while
// compact) and the host reads the record of the call `lag` calls earlier, never a newer one. Outputs
// and reduced flags are identical on every rank and every rank reads the same call's record at the
// same call, so every rank switches mode at the same call without talking to the others.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "compress/mask_tracker.h"
#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy {

struct LearnedDecision {
  bool compact = false;
  uint64_t violations = 0;   // local nonzeros dropped, read from an older call's record
  bool became_compact = false;
  bool fell_back = false;    // a reduced flag reported a violation: back to dense, relearning
  size_t record = 0;         // where this call leaves its record (pass to record_*)
};

class LearnedBuffer {
 public:
  // lag >= 1 calls between a record and its read; stable_after as for MaskTracker.
  LearnedBuffer(uint64_t count, ElemType type, uint32_t stable_after, uint32_t lag, double max_density);

  // At the start of a call: reads the record of the call `lag` calls ago (if any) and decides this
  // call's mode. Allocates plans and slots as needed (never called during graph capture).
  int begin_call(DeviceBackend& backend, LearnedDecision* decision);
  // The plan of a compact call (valid after begin_call decided compact).
  const std::shared_ptr<DevicePlan>& plan() const { return plan_; }
  // After the call's collective is enqueued: leaves this call's record.
  int record_dense(DeviceBackend& backend, size_t record, const void* output, Stream stream);
  int record_compact(DeviceBackend& backend, size_t record, const std::shared_ptr<DevicePlan>& plan,
                     const FlagEncoding& encoding, Stream stream);

  uint64_t calls() const { return calls_; }
  bool compact() const { return static_cast<bool>(plan_); }
  const compress::MaskTracker& tracker() const { return tracker_; }

 private:
  struct Record {
    bool issued = false;
    bool compact = false;
    FlagEncoding encoding;
    std::shared_ptr<DevicePlan> plan;  // the plan the compact call ran on (kept alive until read)
    std::unique_ptr<LagSlot> slot;
  };
  int consume(DeviceBackend& backend, Record& record, LearnedDecision* decision);

  uint64_t count_;
  ElemType type_;
  double max_density_;
  compress::MaskTracker tracker_;
  std::vector<Record> ring_;  // lag entries: the records of the last `lag` calls
  std::shared_ptr<DevicePlan> plan_;  // non-null while compact
  uint64_t calls_ = 0;
};

}  // namespace sieve::plugin::proxy
