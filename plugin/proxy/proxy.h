// The collective proxy's host logic: for each all-reduce it decides dense or compact, keeps plans per
// (communicator, buffers, count, dtype), checks that every rank holds the same published mask before
// a plan is first used, runs learned masks at a fixed lag, and defers post-collective work inside
// NCCL groups. NCCL-free and CUDA-free: the device and the real NCCL sit behind DeviceBackend, so
// all of this is tested on the CPU with a fake backend.
//
// Consistency: every rank must run the same collective with the same count, so decisions rest only
// on what every rank sees identically: published masks after their hashes agreed (a tiny all-reduce),
// learned masks from all-reduce outputs read at a fixed lag. The proxy assumes what NCCL assumes:
// every rank issues the same sequence of collectives, and trainers publish masks at the same point
// of that sequence on every rank (before the collectives that use them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "compress/mask_registry.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/learned_buffer.h"
#include "plugin/stats.h"

namespace sieve::plugin::proxy {

struct ProxyOptions {
  bool track = false;           // SIEVE_TRACK: learn masks of buffers nobody published
  uint32_t track_stable = 3;    // SIEVE_TRACK_STABLE
  uint32_t track_lag = 2;       // SIEVE_TRACK_LAG (>= 1)
  double max_density = 0.9;     // SIEVE_PROXY_MAX_DENSITY / 100: denser masks run dense
  uint64_t min_count = 16384;   // SIEVE_PROXY_MIN_COUNT: smaller buffers (losses, metrics) pass through
};

// Why a call ran the way it did (for tests and trace logs).
enum class Path {
  kPassThrough,      // not eligible (dtype, op) or nothing published and tracking off
  kDense,            // eligible, but no usable plan (dense mask, unchecked, mismatch, capture)
  kCompactPublished,
  kCompactLearned,
};
const char* path_name(Path path);

class Proxy {
 public:
  Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats);

  int all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm, Stream stream,
                 Path* path = nullptr);
  int group_start();
  int group_end();

  // Published-mask agreement of a buffer, for tests and logs.
  enum class Agreement { kUnchecked, kAgreed, kMismatch };
  Agreement agreement(const BufferKey& key) const;
  size_t plans() const;

 private:
  struct PublishedState {
    uint64_t generation = ~0ull;             // registry generation last looked at
    std::shared_ptr<const compress::Mask> mask;  // null: no published mask covers the buffer
    Agreement agreement = Agreement::kUnchecked;
    std::shared_ptr<DevicePlan> plan;        // set when agreed and worth compacting
    bool captured = false;                   // a CUDA graph holds plan's buffers: never free them
  };
  struct BufferState {
    PublishedState published;
    std::unique_ptr<LearnedBuffer> learned;
  };
  struct GroupState {
    int depth = 0;
    std::vector<std::function<int()>> after;  // scatters and records, run after the group's launch
  };

  std::shared_ptr<BufferState> state_for(const BufferKey& key);
  GroupState& group_state();
  bool in_group();
  // Runs `work` now, or after the outermost ncclGroupEnd when inside a group.
  int after_collective(std::function<int()> work);
  // Brings the published view of the buffer up to date; false when the plan had to change.
  int refresh_published(const BufferKey& key, PublishedState& s);
  int agree_published(const BufferKey& key, PublishedState& s, Stream stream);
  int run_compact_published(const BufferKey& key, const std::shared_ptr<DevicePlan>& plan, ReduceOp op,
                            Stream stream);
  // Drops the buffer's plan; one a captured graph uses is kept alive for the process's lifetime.
  void retire_plan(PublishedState& s);
  int run_learned(const BufferKey& key, BufferState& state, ReduceOp op, Stream stream, Path* path);
  int dense(const BufferKey& key, ReduceOp op, Stream stream);

  DeviceBackend& backend_;
  const compress::MaskRegistry& registry_;
  ProxyOptions options_;
  ProcessStats& stats_;
  // Guards the maps only; never held across a backend call (ranks of one process may be threads
  // that must all reach a collective for any of them to return).
  mutable std::mutex mutex_;
  std::unordered_map<BufferKey, std::shared_ptr<BufferState>, BufferKeyHash> buffers_;
  std::unordered_map<std::thread::id, GroupState> groups_;
  std::vector<std::shared_ptr<DevicePlan>> captured_plans_;  // graphs may replay them at any time
};

}  // namespace sieve::plugin::proxy
