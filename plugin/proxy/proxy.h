// SPDX-License-Identifier: Apache-2.0
// The collective proxy's host logic: what each interposed all-reduce, reduce-scatter and all-gather
// runs (dense, or compacted on an agreed mask), commits, learned masks, NCCL groups, non-blocking
// communicators, CUDA graph capture, aborts and communicator lifetimes. NCCL-free and CUDA-free: the
// device and the real NCCL sit behind DeviceBackend, so all of it is tested on the CPU with a fake
// multi-rank backend.
//
// The first law (docs/DESIGN.md, "Contracts"): whether a rank issues a collective of its own, and the
// shape of every collective it issues, depends only on the trainer's program order on that
// communicator and on the outputs of earlier collectives on it. Concretely:
//  - the proxy issues nothing of its own on a communicator before the trainer's first commit there;
//    a commit is a collective the trainer issues (sieve_comm_commit, or the binding's token), its
//    vote compares the staged table and every job-wide setting, and the verdict every rank reads
//    from it decides, from that point of the communicator's sequence, what every rank compacts;
//  - a collective compacts only when its buffer exactly matches an entry of the agreed table (base
//    address, element count, dtype), with a plan built before the vote, so nothing can fail, wait or
//    allocate between the verdict and its use; publishing and retracting only stage for the next
//    commit;
//  - learned masks start only after an agreed commit with SIEVE_TRACK=on, are keyed by signature,
//    read at a fixed lag, and voted on;
//  - once a rank has decided to compact, a local failure never makes it skip or change the
//    collective: the proxy aborts the communicator with a clear message instead;
//  - an abort (ncclCommAbort/ncclCommDestroy from any thread) takes no lock a call holds: it raises
//    the communicator's CommLiveness, which every host wait polls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compress/mask_registry.h"
#include "plugin/config.h"
#include "plugin/proxy/agreement.h"
#include "plugin/proxy/call_history.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/learned_signature.h"
#include "plugin/stats.h"

namespace sieve::plugin::proxy {

// Job-wide settings: they must be the same on every rank (as NCCL's own variables must). Every
// commit compares their fingerprint, so a difference shows as a refused commit, never as a hang.
struct ProxyOptions {
  bool enabled = true;                        // SIEVE_PROXY (off: take part in commits, refuse them, never compact)
  config::Track track = config::Track::kOff;  // SIEVE_TRACK
  uint32_t track_stable = 3;                  // SIEVE_TRACK_STABLE
  uint32_t track_lag = 2;                     // SIEVE_TRACK_LAG (>= 1)
  PlanRules rules;                            // SIEVE_PROXY_MAX_DENSITY / 100, SIEVE_PROXY_MIN_COUNT
  bool verify = false;                        // SIEVE_PROXY_VERIFY
  // What every rank must share: everything above but SIEVE_PROXY (a rank with the proxy off refuses
  // in its own words) and the difference between off and observe (observe issues nothing).
  uint64_t fingerprint() const;
};

// Why a call ran the way it did (for tests and trace logs).
enum class Path {
  kPassThrough,  // nothing to decide: not eligible, or no agreed commit on the communicator
  kDense,        // eligible, but no agreed plan matches it
  kCompactPublished,
  kCompactLearned,
  kCommit,  // the binding's commit token
};
const char* path_name(Path path);

// A commit whose vote is issued and whose verdict is not read yet (inside a group): commit.cc.
struct PendingCommit;

// What a commit decided on its communicator (sieve_commit_result_t).
struct CommitOutcome {
  enum class State { kRefused, kActivated, kPending } state = State::kRefused;
  uint64_t commit = 0;  // the communicator's commit number
  uint64_t masks = 0, compacting = 0;
  std::string reason;
};

class Proxy {
 public:
  Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats);

  int all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm, Stream stream,
                 Path* path = nullptr);
  int reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                     Stream stream, Path* path = nullptr);
  int all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream stream,
                 Path* path = nullptr);
  // A collective the proxy never changes (a type or an op it does not know: NCCL's own arguments go
  // to NCCL unchanged): counted in the communicator's sequence; an error when the proxy aborted it.
  int pass_through(Comm comm, CallKind kind, uint64_t count);
  // NCCL created (or destroyed) a pre-multiplied sum on `comm` (ncclRedOpCreatePreMulSum): while it
  // lives, collectives reducing with it compact like sums.
  void premul_sum_created(Comm comm, int32_t handle);
  void premul_sum_destroyed(Comm comm, int32_t handle);
  bool premul_sum_known(Comm comm, int32_t handle);
  int group_start();
  int group_end();
  int group_simulate_end(void* sim_info);

  // The trainer's commit on `comm` (sieve_comm_commit): a collective on `stream`.
  int commit(Comm comm, Stream stream, uint32_t flags, CommitOutcome* outcome);
  // The binding's commit: this thread's next all-reduce of `token` (SIEVE_COMMIT_TOKEN_WORDS int64,
  // max, in place) is the commit; its outcome is kept for commit_outcome().
  void arm_commit(const void* token, uint32_t flags);
  bool commit_outcome(const void* token, CommitOutcome* out);

  // Before the real ncclCommAbort / ncclCommDestroy, from any thread, whatever the communicator is
  // doing: stops every host wait on it, and fails every later call on it, without taking any lock a
  // call holds (`why`: report the state first, as at an abort). True when the proxy itself aborted
  // it already: the handle is dead and must not reach NCCL again.
  bool release(Comm comm, const char* why);
  // After NCCL has torn it down: forgets it (NCCL may give a new communicator the same handle).
  void forget(Comm comm);
  // NCCL created a communicator at `comm` (ncclCommInitRank*, InitAll, Split, Shrink): whatever the
  // proxy knew at that address is forgotten. When that was one the proxy aborted and NCCL freed
  // (no ncclCommRevoke: NCCL < 2.28.7) and the job has not torn down its handle yet, the first
  // teardown of the address is still owed to that dead handle.
  void created(Comm comm);
  // The job's ncclCommDestroy / ncclCommAbort of `comm` (`why`: report the state first, as at an
  // abort): true when it must reach NCCL. False for a handle the proxy's abort freed, and for the
  // owed teardown of such a handle whose address a new communicator has now, which must never reach
  // the new one.
  bool teardown(Comm comm, const char* why);
  // ncclCommFinalize of `comm` must not reach NCCL: the proxy aborted it, or it is such a dead handle.
  bool dead_handle(Comm comm) const;
  // True when the proxy aborted this communicator (every later call on it fails).
  bool aborted(Comm comm) const;
  // The interposed ncclCommGetAsyncError (a watchdog thread's poll): never reaches a handle an abort
  // may be freeing, whoever aborts it; a communicator the proxy aborted reports kResultSystemError.
  int async_error(Comm comm, int* error);

  // Every communicator's recent collectives and what it waits for (hang forensics).
  std::string describe_state(const char* why) const;
  // Where describe_state goes when a communicator is aborted (default: the log). Set before use.
  void set_report_sink(std::function<void(const std::string&)> sink) { report_ = std::move(sink); }

  // For tests and logs.
  size_t active_entries(Comm comm) const;
  uint64_t commits(Comm comm) const;
  size_t graph_plans(Comm comm) const;  // plans kept only for captured graphs' replays
  // Nonzero values its published masks pruned (dropped: the result is the trusted mask's), as far
  // as the device's count has reached the host.
  uint64_t mask_violations(Comm comm) const;

 private:
  struct CommState {
    explicit CommState(Comm c) : comm(c) {}
    const Comm comm;
    int nranks = 1, rank = 0;
    // One call on a communicator at a time, as NCCL requires of its callers. Never taken by an abort.
    std::mutex mutex;
    CommLiveness live;
    std::atomic<bool> failed{false};  // the proxy aborted it itself
    // Who owns the real abort: 0 nobody yet, 1 the proxy (fail_comm), 2 the job (release). Then
    // `abort_done` once the proxy's abort returned, `handle_kept` when it left the handle valid.
    std::atomic<int> abort_owner{0};
    std::atomic<bool> abort_done{false}, handle_kept{false};
    std::atomic<bool> captured{false};              // it must outlive a graph that no graph can hold it for
    std::atomic<bool> forgotten{false};             // torn down: a thread's cached handle is stale
    std::atomic<const char*> waiting_for{nullptr};  // what a host wait on it waits for, for dumps
    CallHistory history;
    // The agreed state; changes only at commits (and learned votes), identically on every rank.
    uint64_t commits = 0;
    bool agreed = false;  // the last commit was agreed: settings compared, learning and verify allowed
    uint64_t table_hash = 0;
    std::unordered_map<uintptr_t, ActiveEntry> active;  // buffers' masks, by base
    // Collectives' masks (FSDP's fresh buffers), in publish order. A reduce-scatter or all-gather no
    // buffer mask matches compacts only with a mask its shape identifies for certain: the one mask of
    // that shape, or several that are all equal. Nothing about the trainer's order decides which.
    std::vector<ActiveEntry> shape_masks;
    std::vector<bool> ambiguous;              // per shape mask: another mask of its shape differs (it runs dense)
    std::unordered_set<int32_t> premul_sums;  // NCCL handles of pre-multiplied sums alive on it
    std::vector<std::shared_ptr<EntryPlan>> graph_plans;  // captured, no longer active, kept_for_good
    // Plans graphs captured with a pruned-nonzero count: replays count on the device, and nothing
    // eager may ever read it again, so commits and teardown add what reached the host. Its own lock:
    // a teardown takes none a call may hold.
    std::mutex graph_mutex;
    std::vector<std::weak_ptr<EntryPlan>> graph_counted;
    // Shared with deferred work: a commit at a group's end may drop them while a record of the same
    // group still waits to run.
    std::map<std::pair<uint64_t, DType>, std::shared_ptr<LearnedSignature>> learned;
    // Staging of the proxy's own agreements, one per kind: a group may hold a commit's vote, a
    // learned vote and verdicts at once. A second commit in one group gets staging of its own.
    std::unique_ptr<Exchange> vote;  // commits'
    bool vote_held = false;          // a commit in an open group reads its verdict from `vote` at its end
    std::unique_ptr<Exchange> learned_vote, verdict_vote;
    // SIEVE_PROXY_VERIFY inside a CUDA graph: a fixed "no difference" vote, never rewritten, so that a
    // captured call issues the same shared verdict as an eager one on another rank (a graph cannot
    // wait for a comparison, and its replays re-read this staging).
    std::shared_ptr<Exchange> captured_verdict;  // graphs that captured it hold it too
    std::unordered_set<uintptr_t> warned;        // buffers already warned about (near misses, stale graphs)
    bool warned_failed = false, warned_observe = false, warned_ambiguous = false;
    std::atomic<bool> warned_violations{false};
    std::atomic<uint64_t> mask_violations{0};  // published masks' pruned nonzeros seen so far
    // NCCL groups on this communicator: the number of the outermost group that last held one of its
    // compacted collectives, and whether that group is still open. A function of the communicator's
    // call order and of group nesting, never of which thread issued the calls.
    uint64_t group_serial = 0;
    bool group_open = false;
  };
  // One call from the trainer on a communicator; holds the communicator's lock until it returns.
  struct Call {
    std::shared_ptr<CommState> state;
    Stream stream = nullptr;
    int capturing = -1;  // -1: not asked yet
    std::unique_lock<std::mutex> lock;
  };
  // One compacted collective: gathered before its collective, scattered after (inside a group: the
  // gathers just before the group's launch, the scatters just after).
  struct Compaction {
    Collective coll = Collective::kAllReduce;
    std::shared_ptr<EntryPlan> plan;
    const void* send = nullptr;
    void* recv = nullptr;
    ReduceOp op = ReduceOp::kSum;
    std::shared_ptr<LearnedSignature> learned;  // a learned-mask call: flag and record
    size_t record = 0;
    bool moved = false;
    bool verify = false;           // SIEVE_PROXY_VERIFY: the dense result is in plan->verify_buffer()
    bool verify_captured = false;  // SIEVE_PROXY_VERIFY in a graph: the verdict only, with the fixed vote
    uint64_t seq = 0;
  };
  // Work that waits for the outermost ncclGroupEnd.
  struct Deferred {
    enum class Kind { kCompaction, kRecord, kCommit, kLearnedVote } kind;
    std::shared_ptr<CommState> state;
    Stream stream = nullptr;
    Compaction compaction;                      // kCompaction
    std::shared_ptr<LearnedSignature> learned;  // kRecord, kLearnedVote
    size_t record = 0;                          // kRecord
    const void* output = nullptr;               // kRecord
    std::shared_ptr<PendingCommit> commit;      // kCommit
    Vote vote;                                  // kLearnedVote: this rank's, while its exchange runs
    std::string why;                            // kLearnedVote: why this rank could not prepare it
  };
  // One communicator's deferred work at a group's end, in call order: it stops at an agreement's
  // exchange until every communicator's next exchange has been issued together (one round).
  struct Lane {
    CommState* state = nullptr;  // alive: the group's deferred work holds it
    size_t next = 0;             // index into ThreadState::deferred of its next (or suspended) item
    bool waited = false;         // a non-blocking group's collectives are on their streams
    bool resume = false;         // the suspended item's exchange ran: its result is in its host words
    ExchangeStep step;           // the exchange its suspended item needs
    Stream stream = nullptr;
    int issued = kResultSuccess;
  };
  // SIEVE_PROXY_VERIFY's shared verdict: one 6-word all-reduce per communicator saying whether any
  // rank found a difference (`what`: this rank's, empty when none).
  struct VerifyVerdict {
    CommState* state = nullptr;  // alive: the group's deferred work holds it until they are shared
    Stream stream = nullptr;
    std::string what;
    bool captured = false;  // in a graph: the fixed vote is shared and nothing is read back
  };
  struct ThreadState {
    int depth = 0;
    std::vector<Deferred> deferred;
    std::vector<std::shared_ptr<CommState>> grouped;  // communicators whose group this thread's group opened
    // At a group's end: SIEVE_PROXY_VERIFY's comparisons, one per communicator, shared together after
    // every other deferred step (one thread may drive several ranks' communicators in one group).
    bool collecting_verdicts = false;
    std::vector<VerifyVerdict> verdicts;
    std::vector<Lane> lanes;
    const void* armed_token = nullptr;
    uint32_t armed_flags = 0;
    const void* outcome_token = nullptr;
    CommitOutcome outcome;
  };

  // The calling thread's last proxy, communicator and state: a call on the communicator it used last
  // (the common case: a training loop) takes no global lock. The state is held weakly: a
  // communicator torn down must not live on (with its agreed table, and so the masks
  // sieve_mask_released reports on) for as long as the last thread that called it.
  struct ThreadCache {
    uint64_t proxy = 0;
    void* thread_state = nullptr;
    Comm comm = nullptr;
    std::weak_ptr<CommState> comm_state;
  };
  static thread_local ThreadCache t_cache;

  // The communicator's state, or null: found under the map's lock, which is never held longer.
  std::shared_ptr<CommState> find(Comm comm) const;
  // read(state) under the communicator's own lock (a call's: it waits for the call to return), or
  // `absent` for a communicator the proxy never saw.
  template <typename T, typename Read> T read_locked(Comm comm, T absent, Read read) const;
  int enter(Comm comm, std::shared_ptr<CommState>* out);
  // Finds (or makes) the communicator's state and takes its lock into *call; an error, and nothing
  // run, on a communicator that was aborted.
  int begin_call(Comm comm, Stream stream, Call* call);
  int capturing(Call& call, bool* out);
  ThreadState& thread_state();
  int fail_comm(CommState& cs, int rc, const std::string& what);
  void note(CommState& cs, CallKind kind, ReduceOp op, std::optional<DType> type, CallPath path, uint64_t count);
  // A host wait on a communicator: names it for dumps while it lasts.
  struct Waiting {
    Waiting(CommState& state, const char* what) : cs(state) { cs.waiting_for.store(what, std::memory_order_relaxed); }
    ~Waiting() { cs.waiting_for.store(nullptr, std::memory_order_relaxed); }
    CommState& cs;
  };

  // Commits (commit.cc).
  int run_commit(Call& call, uint32_t flags, void* token, CommitOutcome* outcome);
  int finish_commit(CommState& cs, Stream stream, PendingCommit& pending);
  // A commit's verdict one exchange at a time: *next is what must be exchanged before it is called
  // again; empty once the outcome is applied.
  int step_commit(CommState& cs, Stream stream, PendingCommit& pending, ExchangeStep* next);
  void withdraw_commit(CommState& cs, PendingCommit& pending);
  void release_vote(CommState& cs, PendingCommit& pending);
  void apply(CommState& cs, TableAgreement& agreement, CommitOutcome* outcome);
  int vote_learned(CommState& cs, LearnedSignature& sig, Stream stream);
  // A learned-mask vote in two halves around its exchange (*next).
  void propose_learned(CommState& cs, LearnedSignature& sig, Vote* mine, std::string* why, ExchangeStep* next);
  void settle_learned(CommState& cs, LearnedSignature& sig, const Vote& mine, const std::string& why);
  // One exchange, issued and read back now (outside any group).
  int exchange_now(CommState& cs, Stream stream, const ExchangeStep& step);

  // Collectives (collectives.cc).
  const ActiveEntry* match(CommState& cs, const void* base, uint64_t count, DType type);
  const ActiveEntry* shape_mask(CommState& cs, Collective collective, uint64_t count, DType type);
  bool whole_count(uint64_t per_rank, int nranks, uint64_t* count) const;
  int dense(Collective coll, const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm,
            Stream stream);
  int sharded(Collective coll, const void* send, void* recv, uint64_t per_rank, DType type, ReduceOp op, Comm comm,
              Stream stream, Path* path);
  int compact(Call& call, Compaction& c, Path* path);
  int gather_kept(CommState& cs, const Compaction& c, Stream stream);
  int scatter_kept(CommState& cs, const Compaction& c, Stream stream);
  // A published plan's pruned nonzeros: counted on the device; what reached the host is added here.
  int count_pruned(CommState& cs, EntryPlan& plan, const DeviceLayout& layout, const void* src, bool last,
                   Stream stream);
  void add_pruned(CommState& cs, EntryPlan& plan);
  // What replays of captured plans counted so far (commits, teardown: no lock a call holds is needed).
  void collect_graph_counts(CommState& cs);
  int verify(CommState& cs, const Compaction& c, Stream stream);
  // This rank's verdict (empty `what`: no difference): shared now, or at the group's end.
  int verdict(CommState& cs, Stream stream, const std::string& what, bool captured);
  int share_verdicts(std::vector<VerifyVerdict>& verdicts);
  int learned_all_reduce(Call& call, const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Path* path);
  int run_after(Deferred& work);
  void warn_uncommitted(CommState& cs, uint64_t count);

  // Groups (groups.cc). What must follow a collective: now (after its kernel is on the stream), or
  // after the group.
  int after(Call& call, int rc, Deferred&& work);
  int run_group_end(ThreadState& ts);
  void advance(ThreadState& ts, Lane& lane, int group_rc, int* rc);
  void exchange_round(ThreadState& ts, int* rc);
  void close_groups(ThreadState& ts);

  const uint64_t id_;  // this instance, for the calling thread's cache of its state
  DeviceBackend& backend_;
  const compress::MaskRegistry& registry_;
  const ProxyOptions options_;
  const uint64_t fingerprint_;
  ProcessStats& stats_;
  // Guards the maps only; never held across a backend call (ranks of one process may be threads
  // that must all reach a collective for any of them to return).
  mutable std::mutex mutex_;
  std::unordered_map<Comm, std::shared_ptr<CommState>> comms_;
  // Each calling thread's state, removed when the thread exits: a later thread, which may get the
  // same std::thread::id, starts afresh instead of inheriting a dead thread's armed token or group.
  struct ThreadStates;
  std::shared_ptr<ThreadStates> threads_;
  // Communicators torn down since a graph captured one of their plans: kept while the process lives.
  std::vector<std::shared_ptr<CommState>> orphaned_;
  // Addresses whose next teardown is a dead handle's (created()): the job's old handle is torn down
  // once, and the new communicator there must not go with it.
  std::unordered_set<Comm> dead_handles_;
  std::atomic<bool> warned_uncommitted_{false};
  std::function<void(const std::string&)> report_;
  void report(const char* why) const;
};

}  // namespace sieve::plugin::proxy
