// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/learned_signature.h"

#include <algorithm>

namespace sieve::plugin::proxy {

LearnedSignature::LearnedSignature(uint64_t count, DType type, const LearnedRules& rules)
    : count_(count),
      type_(type),
      rules_([&] {
        LearnedRules r = rules;
        r.stable = std::max<uint32_t>(r.stable, 1);
        r.lag = std::max<uint32_t>(r.lag, 1);
        return r;
      }()),
      tracker_(rules_.stable),
      ring_(rules_.lag) {}

void LearnedSignature::observe_only(const compress::TrackUpdate& update, LearnedDecision* decision) {
  if (update.drifted) decision->pattern_changed = true;
  std::shared_ptr<const compress::Mask> mask = tracker_.stable_mask();
  if (!mask || mask->density() > rules_.plan.max_density || count_ < rules_.plan.min_count) return;
  const uint64_t sent = mask->kept() + 1;  // the kept elements and the violation flag
  if (sent < count_) decision->would_save = (count_ - sent) * compress::dtype_size(type_);
}

int LearnedSignature::consume(DeviceBackend& backend, Comm comm, CommLiveness& live, Record& record,
                              LearnedDecision* decision) {
  if (!record.issued) return kResultSuccess;
  record.issued = false;
  if (record.compact) {
    uint64_t flag = 0, violations = 0;
    if (int rc = backend.read_flag(*record.slot, comm, live, &flag, &violations)) return rc;
    decision->violations += violations;
    // Only a flag from the plan still in force switches: one from an older plan was already acted on.
    if (flag_reports_violation(type_, flag) && plan_ && record.plan == plan_) {
      plan_.reset();
      bound_ = nullptr;
      tracker_.reset();
      decision->fell_back = true;
      // A pattern that flips every few calls would cost a vote and up to `lag` calls of dropped
      // values in every cycle: back off exponentially, and stop after kMaxFallbacks.
      ++fallbacks_;
      quiet_until_ = calls_ + ((uint64_t(rules_.stable) + ring_.size()) << std::min<uint32_t>(fallbacks_, 16));
      if (fallbacks_ >= kMaxFallbacks) {
        retired_ = true;
        decision->retired = true;
      }
    }
    record.plan.reset();
    return kResultSuccess;
  }
  compress::Mask& nonzero = nonzero_;  // read in place: no allocation per call
  if (int rc = backend.read_nonzero(*record.slot, comm, live, count_, &nonzero)) return rc;
  if (rules_.observe) {
    observe_only(tracker_.observe(nonzero), decision);
    return kResultSuccess;
  }
  if (plan_ || proposal_ || calls_ <= quiet_until_) return kResultSuccess;
  tracker_.observe(nonzero);
  if (tracker_.state() != compress::TrackState::kStable) return kResultSuccess;
  std::shared_ptr<const compress::Mask> mask = tracker_.stable_mask();
  if (mask->density() > rules_.plan.max_density || mask->kept() == mask->count()) return kResultSuccess;
  proposal_ = mask;
  decision->propose = true;
  return kResultSuccess;
}

int LearnedSignature::begin_call(DeviceBackend& backend, Comm comm, CommLiveness& live, const void* send,
                                 LearnedDecision* decision) {
  *decision = LearnedDecision();
  calls_at_address_ = send == last_send_ ? calls_at_address_ + 1 : 1;
  last_send_ = send;
  // The record about to be overwritten is exactly the one of the call `lag` calls ago. The call
  // counts even if its collective later fails: every rank sees the same failure.
  decision->record = size_t(calls_ % ring_.size());
  ++calls_;
  for (size_t i = 0; i < spilled_.size();) {
    if (spilled_[i].index != decision->record) {
      ++i;
      continue;
    }
    Record held = std::move(spilled_[i].record);
    spilled_.erase(spilled_.begin() + std::ptrdiff_t(i));
    if (int rc = consume(backend, comm, live, held, decision)) return rc;
  }
  if (int rc = consume(backend, comm, live, ring_[decision->record], decision)) return rc;
  decision->compact = static_cast<bool>(plan_);
  decision->moved = decision->compact && send != bound_;
  return kResultSuccess;
}

uint64_t LearnedSignature::proposal_hash() const {
  uint64_t h = proposal_ ? proposal_->hash() : 0;
  return h ^ (uint64_t(type_) * 0x9e3779b97f4a7c15ull) ^ 0x4c4541524e4544ull;
}

bool LearnedSignature::prepare_proposal(DeviceBackend& backend, std::string* why) {
  prepared_.reset();
  if (!proposal_) return false;
  // The window's records are of the calls lag..lag+stable-1 before this one: all of them, and this
  // one, must have come from the buffer the mask will be bound to.
  if (calls_at_address_ < uint64_t(rules_.stable) + rules_.lag) {
    *why = "the calls its pattern was learned from came from more than one buffer on this rank";
    return false;
  }
  PlanSpec spec{type_, rules_.plan, 1, /*with_flag=*/true, rules_.verify};
  if (EntryPlan::build(backend, proposal_, spec, &prepared_, why)) return false;
  if (!prepared_ || !prepared_->whole()) {
    *why = "the learned mask compacts nothing worth it";
    return false;
  }
  return true;
}

void LearnedSignature::withdraw() {
  prepared_.reset();
  proposal_.reset();
}

void LearnedSignature::settle(bool unanimous) {
  if (unanimous && prepared_) {
    plan_ = std::move(prepared_);
    bound_ = last_send_;
    refusals_ = 0;
  } else {
    tracker_.reset();
    // Each refusal doubles the wait before the next proposal, so a rank that cannot prepare one
    // costs a vote rarely, not every few calls.
    refusals_ = std::min<uint32_t>(refusals_ + 1, 16);
    quiet_until_ = calls_ + ((uint64_t(rules_.stable) + ring_.size()) << refusals_);
  }
  prepared_.reset();
  proposal_.reset();
}

int LearnedSignature::record_dense(DeviceBackend& backend, size_t record, const void* output, Stream stream) {
  Record& r = ring_.at(record);
  // Records of a group are left at its end, after its later calls already passed their slot: a
  // group reading this signature more than `lag` times would overwrite a compact call's unread flag
  // with a dense pattern, and a violation would never be seen. A flag decides; a pattern seen while
  // a mask is in force does not (consume ignores it), so the flag stays until read. Every rank
  // skips the same records: which are unread follows from the calls and groups alone.
  if (r.issued && r.compact) return kResultSuccess;
  if (!r.slot)
    if (int rc = backend.create_slot(count_, &r.slot)) return rc;
  if (int rc = backend.record_nonzero(*r.slot, output, count_, type_, stream)) return rc;
  r.issued = true;
  r.compact = false;
  return kResultSuccess;
}

int LearnedSignature::record_compact(DeviceBackend& backend, size_t record, const std::shared_ptr<EntryPlan>& plan,
                                     Stream stream) {
  Record& r = ring_.at(record);
  if (r.issued && r.compact) {
    // Another compact call's flag is still unread (calls from two threads taking turns, one inside
    // a group): it waits beside the slot, read just before it, never overwritten.
    spilled_.push_back(Spilled{record, std::move(r)});
    r = Record();
  }
  if (!r.slot)
    if (int rc = backend.create_slot(count_, &r.slot)) return rc;
  if (int rc = backend.record_flag(*r.slot, plan->flag(), plan->element_size(), *plan->violations(), stream)) return rc;
  r.issued = true;
  r.compact = true;
  r.plan = plan;
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
