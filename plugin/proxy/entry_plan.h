// SPDX-License-Identifier: Apache-2.0
// The device form of one agreed mask on one communicator: what its all-reduces, reduce-scatters and
// all-gathers compact with. Built only while a commit or a learned mask is being agreed (never on the
// hot path), from inputs identical on every rank (the mask, the communicator's size, the job-wide
// rules), so whether a collective compacts, and to how many elements, is the same on every rank.
//
// Reduce-scatter and all-gather split the buffer into one shard per rank. Each shard is compacted
// on its own and padded to the largest shard's kept count K, so every rank sends and receives K
// elements per shard: nranks * K elements instead of count. Padding is never read back.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/mask.h"
#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy {

// Job-wide thresholds (SIEVE_PROXY_MAX_DENSITY, SIEVE_PROXY_MIN_COUNT).
struct PlanRules {
  double max_density = 0.9;
  uint64_t min_count = 16384;
};

// What a plan is built for.
struct PlanSpec {
  DType type = DType::kF32;
  PlanRules rules;
  int nranks = 1;
  bool with_flag = false;  // learned masks: one more element carries the violation flag, with a counter
  bool verify = false;     // SIEVE_PROXY_VERIFY: a whole-buffer scratch for the dense run
};

class EntryPlan {
 public:
  // Null *out (and rc 0) when the mask would compact nothing worth it. On failure *why says what this
  // rank could not prepare.
  static int build(DeviceBackend& backend, std::shared_ptr<const compress::Mask> mask, const PlanSpec& spec,
                   std::shared_ptr<EntryPlan>* out, std::string* why);

  const compress::Mask& mask() const { return *mask_; }
  const std::shared_ptr<const compress::Mask>& shared_mask() const { return mask_; }
  DType type() const { return type_; }
  size_t element_size() const { return compress::dtype_size(type_); }
  uint64_t count() const { return mask_->count(); }

  // All-reduce: null when it runs dense.
  const DeviceLayout* whole() const { return whole_.get(); }
  uint64_t nnz() const { return mask_->kept(); }
  // Reduce-scatter / all-gather: empty when they run dense.
  const std::vector<std::unique_ptr<DeviceLayout>>& shards() const { return shards_; }
  uint64_t shard_width() const { return shard_width_; }

  void* compact() { return buffer_->data(); }
  void* compact_at(uint64_t element) { return static_cast<char*>(buffer_->data()) + element * element_size(); }
  void* flag() { return compact_at(nnz()); }
  DeviceBuffer* violations() { return violations_.get(); }
  // Published masks: nonzero values this plan's mask pruned, counted on the device (null for learned
  // plans, whose flag counts them). `reported`: the part of it already added to the statistics.
  ViolationCounter* pruned_nonzeros() { return pruned_.get(); }
  // Eager calls add it under the communicator's lock; replays of graphs reach the host at commits and
  // at teardown, which may not hold it.
  std::atomic<uint64_t> reported{0};
  bool verifies() const { return static_cast<bool>(verify_); }
  void* verify_buffer() { return verify_ ? verify_->data() : nullptr; }

  // A CUDA graph captured a collective on this plan: its memory must outlive every replay. The graph
  // holds it (DeviceBackend::keep_for_graph) unless `kept_for_good`: no graph could, so the
  // communicator keeps it for the process's life.
  bool captured = false;
  bool kept_for_good = false;
  // The communicator's outermost NCCL group that last used the compact buffer (CommState's
  // group_serial): a second use in the same group runs dense (its collective would reduce the first
  // one's data in the one buffer).
  uint64_t group_serial = 0;

 private:
  std::shared_ptr<const compress::Mask> mask_;
  DType type_ = DType::kF32;
  std::unique_ptr<DeviceLayout> whole_;
  std::vector<std::unique_ptr<DeviceLayout>> shards_;
  uint64_t shard_width_ = 0;
  std::unique_ptr<DeviceBuffer> buffer_;
  std::unique_ptr<DeviceBuffer> violations_;
  std::unique_ptr<ViolationCounter> pruned_;
  std::unique_ptr<DeviceBuffer> verify_;
};

}  // namespace sieve::plugin::proxy
