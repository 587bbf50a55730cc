// The collective proxy's host logic: what each interposed all-reduce, reduce-scatter and all-gather
// runs (dense, or compacted on an agreed mask), the agreement of committed tables and learned masks,
// NCCL groups, non-blocking communicators, CUDA graph capture and communicator lifetimes. NCCL-free
// and CUDA-free: the device and the real NCCL sit behind DeviceBackend, so all of it is tested on the
// CPU with a fake multi-rank backend.
//
// The first law (docs/DESIGN.md, "Consistency"): every decision that changes which collectives a
// rank issues, or their counts, is a function of inputs identical on every rank: the sequence of
// collectives and their count/dtype/op, explicit calls every rank makes at the same program point
// (publish, retract, commit), group structure, graph capture, and results of collectives. Concretely:
//  - a commit changes nothing by itself; the next collective on each communicator (after the group
//    it is in) runs a vote on the committed table, and the table becomes active only on a unanimous
//    verdict, which every rank receives identically;
//  - a collective compacts only when its buffer exactly matches an active entry (base address,
//    element count, dtype) that no publish or retract has retired since, and with a plan built
//    before the vote (so no allocation, wait or failure can come between the verdict and its use);
//  - learned masks are keyed by signature, not address, read at a fixed lag, and voted on too;
//  - once a rank has decided to compact, a local failure never makes it skip or change the
//    collective: the proxy aborts the communicator with a clear message instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compress/mask_registry.h"
#include "plugin/proxy/agreement.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/learned_signature.h"
#include "plugin/stats.h"

namespace sieve::plugin::proxy {

// Job-wide settings: they must be the same on every rank (as NCCL's own variables must). Their
// fingerprint travels in every vote, so a difference shows as a refused table, never as a hang.
struct ProxyOptions {
  bool enabled = true;         // SIEVE_PROXY (off: pass through, and refuse every table)
  bool track = false;          // SIEVE_TRACK: learn masks of buffers nobody published
  uint32_t track_stable = 3;   // SIEVE_TRACK_STABLE
  uint32_t track_lag = 2;      // SIEVE_TRACK_LAG (>= 1)
  PlanRules rules;             // SIEVE_PROXY_MAX_DENSITY / 100, SIEVE_PROXY_MIN_COUNT
  uint64_t fingerprint() const;
};

// Why a call ran the way it did (for tests and trace logs).
enum class Path {
  kPassThrough,  // nothing to decide: not eligible, or nothing committed and no tracking
  kDense,        // eligible, but no agreed plan matches it
  kCompactPublished,
  kCompactLearned,
};
const char* path_name(Path path);

class Proxy {
 public:
  Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats);

  int all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm, Stream stream,
                 Path* path = nullptr);
  int reduce_scatter(const void* send, void* recv, uint64_t recv_count, ElemType type, ReduceOp op, Comm comm,
                     Stream stream, Path* path = nullptr);
  int all_gather(const void* send, void* recv, uint64_t send_count, ElemType type, Comm comm, Stream stream,
                 Path* path = nullptr);
  int group_start();
  int group_end();
  int group_simulate_end(void* sim_info);

  // Call before the real ncclCommDestroy / ncclCommFinalize / ncclCommAbort: forgets everything the
  // proxy holds for the communicator. True when the proxy itself aborted it: the handle is dead and
  // must not reach NCCL again.
  bool release(Comm comm);
  // True when the proxy aborted this communicator (every later call on it fails).
  bool aborted(Comm comm) const;

  // For tests and logs.
  size_t active_entries(Comm comm) const;
  uint64_t agreed_epoch(Comm comm) const;

 private:
  struct CommState {
    explicit CommState(Comm c) : comm(c) {}
    const Comm comm;
    std::mutex mutex;  // one call on a communicator at a time, as NCCL requires of its callers
    int nranks = 1, rank = 0;
    bool aborted = false;
    uint64_t epoch_seen = 0;           // the latest commit voted on here
    bool table_vote_scheduled = false;  // deferred to the end of the current group
    std::unique_ptr<DeviceBuffer> vote_staging;
    std::unordered_map<uintptr_t, ActiveEntry> active;   // by buffer base
    std::vector<std::shared_ptr<EntryPlan>> graph_plans;  // captured, no longer active: kept for replays
    std::map<std::pair<uint64_t, ElemType>, std::unique_ptr<LearnedSignature>> learned;
    std::unordered_set<uintptr_t> warned;  // buffers already warned about (near misses, stale graphs)
  };
  // One interposed call: its communicator's state (locked) and its stream.
  struct Call {
    std::shared_ptr<CommState> state;
    Stream stream;
    int capturing = -1;  // -1: not asked yet
  };
  // Work that must follow the collectives of the current group, after its launch.
  struct Deferred {
    std::shared_ptr<CommState> state;
    Stream stream;
    std::function<int()> work;   // a scatter or a record
    const char* what = "";
    bool table_vote = false;     // instead of work: the communicator's table vote
    LearnedSignature* learned_vote = nullptr;  // or a learned mask's vote
  };
  struct GroupState {
    int depth = 0;
    std::vector<Deferred> after;
  };

  int enter(Comm comm, std::shared_ptr<CommState>* out);
  int prologue(Call& call);
  int capturing(Call& call, bool* out);
  GroupState& group_state();
  bool in_group();
  int after_collective(Call& call, int rc, const char* what, std::function<int()> work);
  int run_deferred(GroupState& group, int group_rc);
  int fail_comm(CommState& cs, int rc, const std::string& what);

  int vote_staging(CommState& cs);
  int vote_table(CommState& cs, Stream stream);
  int vote_learned(CommState& cs, LearnedSignature& sig, Stream stream);
  const ActiveEntry* match(CommState& cs, const void* base, uint64_t count, ElemType type);

  int dense_all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                       Stream stream);
  int compact_all_reduce(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv, ReduceOp op);
  int learned_all_reduce(Call& call, const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op,
                         Path* path);
  int compact_reduce_scatter(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv,
                             ReduceOp op);
  int compact_all_gather(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv);
  void warn_uncommitted(uint64_t count);
  // What every compacted collective does first: note a capture (the graph keeps the plan), count it.
  int begin_compact(Call& call, EntryPlan& plan);
  // The whole buffer's element count of a sharded collective (per-rank count x ranks), false when it
  // overflows or is under SIEVE_PROXY_MIN_COUNT.
  bool whole_count(uint64_t per_rank, int nranks, uint64_t* count) const;

  DeviceBackend& backend_;
  const compress::MaskRegistry& registry_;
  const ProxyOptions options_;
  const uint64_t fingerprint_;
  ProcessStats& stats_;
  // Guards the maps only; never held across a backend call (ranks of one process may be threads
  // that must all reach a collective for any of them to return).
  mutable std::mutex mutex_;
  std::unordered_map<Comm, std::shared_ptr<CommState>> comms_;
  std::atomic<size_t> comm_count_{0};
  std::unordered_map<std::thread::id, GroupState> groups_;
  std::atomic<bool> warned_uncommitted_{false};
};

}  // namespace sieve::plugin::proxy
