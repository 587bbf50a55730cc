#include "plugin/proxy/learned_buffer.h"

#include <algorithm>

namespace sieve::plugin::proxy {

LearnedBuffer::LearnedBuffer(uint64_t count, ElemType type, uint32_t stable_after, uint32_t lag, double max_density)
    : count_(count), type_(type), max_density_(max_density), tracker_(stable_after), ring_(std::max<uint32_t>(lag, 1)) {}

int LearnedBuffer::consume(DeviceBackend& backend, Record& record, LearnedDecision* decision) {
  if (!record.issued) return kResultSuccess;
  record.issued = false;
  if (record.compact) {
    uint64_t flag = 0, violations = 0;
    if (int rc = backend.read_flag(*record.slot, &flag, &violations)) return rc;
    decision->violations += violations;
    // Only a flag from the plan still in force switches: one from an older plan was already acted on.
    if (flag_reports_violation(record.encoding, type_, flag) && plan_ && record.plan == plan_) {
      plan_.reset();
      tracker_.reset();
      decision->fell_back = true;
    }
    record.plan.reset();
    return kResultSuccess;
  }
  compress::Mask nonzero;
  if (int rc = backend.read_nonzero(*record.slot, count_, &nonzero)) return rc;
  if (plan_) return kResultSuccess;  // already compact: a dense record from before the switch
  tracker_.observe(nonzero);
  if (tracker_.state() != compress::TrackState::kStable) return kResultSuccess;
  std::shared_ptr<const compress::Mask> mask = tracker_.stable_mask();
  if (mask->density() > max_density_) return kResultSuccess;  // not worth compacting
  std::unique_ptr<DevicePlan> plan;
  if (int rc = backend.create_plan(*mask, type_, /*with_check=*/true, &plan)) return rc;
  plan_ = std::move(plan);
  decision->became_compact = true;
  return kResultSuccess;
}

int LearnedBuffer::begin_call(DeviceBackend& backend, LearnedDecision* decision) {
  *decision = LearnedDecision();
  // The record about to be overwritten is exactly the one of the call `lag` calls ago. The call
  // counts even if its collective later fails: every rank sees the same failure.
  decision->record = size_t(calls_ % ring_.size());
  ++calls_;
  if (int rc = consume(backend, ring_[decision->record], decision)) return rc;
  decision->compact = static_cast<bool>(plan_);
  return kResultSuccess;
}

int LearnedBuffer::record_dense(DeviceBackend& backend, size_t record, const void* output, Stream stream) {
  Record& r = ring_.at(record);
  if (!r.slot)
    if (int rc = backend.create_slot(count_, &r.slot)) return rc;
  if (int rc = backend.record_nonzero(*r.slot, output, count_, type_, stream)) return rc;
  r.issued = true;
  r.compact = false;
  return kResultSuccess;
}

int LearnedBuffer::record_compact(DeviceBackend& backend, size_t record, const std::shared_ptr<DevicePlan>& plan,
                                  const FlagEncoding& encoding, Stream stream) {
  Record& r = ring_.at(record);
  if (!r.slot)
    if (int rc = backend.create_slot(count_, &r.slot)) return rc;
  if (int rc = backend.record_flag(*r.slot, *plan, stream)) return rc;
  r.issued = true;
  r.compact = true;
  r.encoding = encoding;
  r.plan = plan;
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
