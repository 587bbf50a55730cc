// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/entry_plan.h"

#include <algorithm>

namespace sieve::plugin::proxy {

namespace {

// Compaction pays when it sends at most max_density of the buffer, and strictly less than all of it.
bool worth_it(uint64_t sent, uint64_t count, const PlanRules& rules) {
  return count >= rules.min_count && sent < count && double(sent) <= rules.max_density * double(count);
}

uint64_t kept_in(const compress::Mask& mask, uint64_t first, uint64_t n) {
  uint64_t kept = 0;
  for (const compress::Range& r : mask.runs()) {
    const uint64_t lo = std::max(r.start, first), hi = std::min(r.start + r.length, first + n);
    if (lo < hi) kept += hi - lo;
  }
  return kept;
}

}  // namespace

int EntryPlan::build(DeviceBackend& backend, std::shared_ptr<const compress::Mask> mask, const PlanSpec& spec,
                     std::shared_ptr<EntryPlan>* out, std::string* why) {
  out->reset();
  const DType type = spec.type;
  const PlanRules& rules = spec.rules;
  const int nranks = spec.nranks;
  const bool with_flag = spec.with_flag;
  if (!mask || !compactable(type) || nranks < 1) return kResultSuccess;
  const uint64_t count = mask->count(), nnz = mask->kept();
  const bool whole = worth_it(nnz, count, rules);
  // Shards: K, the largest shard's kept count, decides what reduce-scatter/all-gather send.
  uint64_t width = 0;
  std::vector<uint64_t> shard_kept;
  if (nranks > 1 && count % uint64_t(nranks) == 0 && !with_flag) {
    const uint64_t shard = count / uint64_t(nranks);
    for (int s = 0; s < nranks; ++s) shard_kept.push_back(kept_in(*mask, uint64_t(s) * shard, shard));
    width = *std::max_element(shard_kept.begin(), shard_kept.end());
  }
  const bool sharded = width > 0 && worth_it(uint64_t(nranks) * width, count, rules);
  if (!whole && !sharded) return kResultSuccess;

  auto plan = std::make_shared<EntryPlan>();
  plan->mask_ = mask;
  plan->type_ = type;
  auto failed = [&](int rc, const char* what) {
    *why = std::string("could not prepare ") + what + " for a mask of " + std::to_string(count) + " " +
           dtype_name(type) + " elements";
    return rc;
  };
  if (whole)
    if (int rc = backend.create_layout(*mask, 0, count, &plan->whole_)) return failed(rc, "its device layout");
  if (sharded) {
    const uint64_t shard = count / uint64_t(nranks);
    plan->shard_width_ = width;
    for (int s = 0; s < nranks; ++s) {
      std::unique_ptr<DeviceLayout> layout;
      if (int rc = backend.create_layout(*mask, uint64_t(s) * shard, shard, &layout))
        return failed(rc, "its shard layouts");
      plan->shards_.push_back(std::move(layout));
    }
  }
  const uint64_t elements =
      std::max<uint64_t>({1, whole ? nnz + (with_flag ? 1 : 0) : 0, sharded ? uint64_t(nranks) * width : 0});
  if (int rc = backend.create_buffer(elements * compress::dtype_size(type), &plan->buffer_))
    return failed(rc, "its compact buffer");
  if (with_flag) {
    if (int rc = backend.create_buffer(sizeof(uint64_t), &plan->violations_))
      return failed(rc, "its violation counter");
  } else if (int rc = backend.create_counter(&plan->pruned_)) {
    return failed(rc, "its violation counter");
  }
  if (spec.verify)
    if (int rc = backend.create_buffer(count * compress::dtype_size(type), &plan->verify_))
      return failed(rc, "its SIEVE_PROXY_VERIFY buffer");
  *out = std::move(plan);
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
