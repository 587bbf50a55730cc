// The proxy's entry points, NCCL groups, votes and communicator lifetimes. The compacted and
// learned paths of each collective are in proxy_collectives.cc.
#include "plugin/proxy/proxy.h"

#include <utility>

#include "net/log.h"

namespace sieve::plugin::proxy {

const char* path_name(Path path) {
  switch (path) {
    case Path::kPassThrough: return "pass-through";
    case Path::kDense: return "dense";
    case Path::kCompactPublished: return "compact (published mask)";
    case Path::kCompactLearned: return "compact (learned mask)";
  }
  return "?";
}

uint64_t ProxyOptions::fingerprint() const {
  uint64_t h = 0x50524f5859ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  };
  mix(enabled);
  mix(track);
  mix(track_stable);
  mix(track_lag);
  mix(uint64_t(rules.max_density * 1e6 + 0.5));
  mix(rules.min_count);
  return h;
}

Proxy::Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats)
    : backend_(backend), registry_(registry), options_([&] {
        if (options.track_lag == 0) options.track_lag = 1;
        if (options.track_stable == 0) options.track_stable = 1;
        return options;
      }()),
      fingerprint_(options_.fingerprint()), stats_(stats) {}

// --- communicators ---------------------------------------------------------------------------

int Proxy::enter(Comm comm, std::shared_ptr<CommState>* out) {
  out->reset();
  // Nothing committed, nothing learned, no communicator known: the call passes straight through.
  if (registry_.commit_epoch() == 0 && !(options_.track && options_.enabled) &&
      comm_count_.load(std::memory_order_acquire) == 0)
    return kResultSuccess;
  {
    std::lock_guard lock(mutex_);
    auto it = comms_.find(comm);
    if (it != comms_.end()) {
      *out = it->second;
      return kResultSuccess;
    }
  }
  auto cs = std::make_shared<CommState>(comm);
  if (int rc = backend_.comm_shape(comm, &cs->nranks, &cs->rank)) return rc;
  std::lock_guard lock(mutex_);
  auto [it, inserted] = comms_.emplace(comm, cs);
  if (inserted) comm_count_.fetch_add(1, std::memory_order_acq_rel);
  *out = it->second;
  return kResultSuccess;
}

bool Proxy::release(Comm comm) {
  std::shared_ptr<CommState> cs;
  {
    std::lock_guard lock(mutex_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return false;
    cs = std::move(it->second);
    comms_.erase(it);
    comm_count_.fetch_sub(1, std::memory_order_acq_rel);
  }
  std::lock_guard lock(cs->mutex);
  return cs->aborted;
}

bool Proxy::aborted(Comm comm) const {
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  return it != comms_.end() && it->second->aborted;
}

size_t Proxy::active_entries(Comm comm) const {
  std::shared_ptr<CommState> cs;
  {
    std::lock_guard lock(mutex_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return 0;
    cs = it->second;
  }
  std::lock_guard lock(cs->mutex);
  return cs->active.size();
}

uint64_t Proxy::agreed_epoch(Comm comm) const {
  std::shared_ptr<CommState> cs;
  {
    std::lock_guard lock(mutex_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return 0;
    cs = it->second;
  }
  std::lock_guard lock(cs->mutex);
  return cs->epoch_seen;
}

int Proxy::fail_comm(CommState& cs, int rc, const std::string& what) {
  if (!cs.aborted) {
    SIEVE_WARN("collective proxy: %s (error %d) on communicator %p; aborting the communicator, so that no rank "
               "waits for a collective this rank cannot run as agreed",
               what.c_str(), rc, cs.comm);
    cs.aborted = true;
    backend_.abort_comm(cs.comm);
  }
  return rc ? rc : kResultSystemError;
}

int Proxy::capturing(Call& call, bool* out) {
  if (call.capturing < 0) {
    bool c = false;
    if (int rc = backend_.capture_status(call.stream, &c))
      return fail_comm(*call.state, rc, "CUDA cannot tell whether the stream is being captured");
    call.capturing = c ? 1 : 0;
  }
  *out = call.capturing == 1;
  return kResultSuccess;
}

// Runs before every decision of a call: refuses an aborted communicator, and votes on a new commit
// at the first call that can (not while capturing; after the group when inside one).
int Proxy::prologue(Call& call) {
  CommState& cs = *call.state;
  if (cs.aborted) {
    if (cs.warned.insert(0).second)
      SIEVE_WARN("collective proxy: communicator %p was aborted after an earlier failure; its calls fail", cs.comm);
    return kResultInvalidUsage;
  }
  if (registry_.commit_epoch() == cs.epoch_seen || cs.table_vote_scheduled) return kResultSuccess;
  bool capture = false;
  if (int rc = capturing(call, &capture)) return rc;
  if (capture) return kResultSuccess;
  if (in_group()) {
    cs.table_vote_scheduled = true;
    group_state().after.push_back(Deferred{call.state, call.stream, nullptr, "", true, nullptr});
    return kResultSuccess;
  }
  return vote_table(cs, call.stream);
}

// --- votes -----------------------------------------------------------------------------------

// A rank that cannot take part in a vote must not let the others wait in it: no staging, no vote,
// and the communicator is aborted. Taken at the first vote (never during capture), then kept.
int Proxy::vote_staging(CommState& cs) {
  if (cs.vote_staging) return kResultSuccess;
  if (int rc = backend_.create_buffer(kVoteWords * sizeof(uint64_t), &cs.vote_staging))
    return fail_comm(cs, rc, "no device memory for the proxy's votes");
  return kResultSuccess;
}

int Proxy::vote_table(CommState& cs, Stream stream) {
  cs.table_vote_scheduled = false;
  std::shared_ptr<const compress::CommittedTable> table = registry_.committed();
  if (!table || table->epoch == cs.epoch_seen) return kResultSuccess;
  cs.epoch_seen = table->epoch;
  if (int rc = vote_staging(cs)) return rc;
  std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>> reusable;
  for (const auto& [base, entry] : cs.active)
    if (entry.plan && !entry.source->retired()) reusable.emplace(entry.source->id(), entry.plan);
  AgreementContext ctx{backend_, cs.comm, stream, *cs.vote_staging, options_.rules, fingerprint_, cs.nranks, &reusable,
                       options_.enabled ? nullptr : "SIEVE_PROXY=off on this rank"};
  TableAgreement result;
  if (int rc = agree_table(ctx, *table, &result)) return fail_comm(cs, rc, "the vote on a committed mask table failed");
  if (!result.activated) {
    add(stats_.tables_refused, 1);
    SIEVE_WARN("collective proxy: commit %llu was not activated on communicator %p: %s; its collectives run as "
               "before on every rank", (unsigned long long)table->epoch, cs.comm, result.reason.c_str());
    return kResultSuccess;
  }
  // Plans a captured graph uses stay alive for its replays; warn when such a plan's mask is gone.
  std::unordered_set<uint64_t> kept;
  for (const ActiveEntry& e : result.entries) kept.insert(e.source->id());
  for (auto& [base, entry] : cs.active) {
    if (!entry.plan || !entry.plan->captured) continue;
    cs.graph_plans.push_back(entry.plan);
    if (!kept.count(entry.source->id()))
      SIEVE_WARN("collective proxy: a CUDA graph compacts buffer %p with mask %llu, which commit %llu replaced or "
                 "removed; replays of that graph still use the old mask: capture it again",
                 reinterpret_cast<void*>(base), (unsigned long long)entry.source->id(), (unsigned long long)table->epoch);
  }
  cs.active.clear();
  size_t compacting = 0;
  for (ActiveEntry& e : result.entries) {
    compacting += e.plan ? 1 : 0;
    cs.active[e.source->base()] = std::move(e);
  }
  add(stats_.tables_activated, 1);
  SIEVE_INFO("collective proxy: commit %llu is active on communicator %p (%d ranks): %zu masks, %zu of them compact",
             (unsigned long long)table->epoch, cs.comm, cs.nranks, cs.active.size(), compacting);
  return kResultSuccess;
}

int Proxy::vote_learned(CommState& cs, LearnedSignature& sig, Stream stream) {
  if (int rc = vote_staging(cs)) return rc;
  std::string why;
  const bool ok = options_.enabled && sig.prepare_proposal(backend_, &why);
  Verdict verdict;
  if (int rc = vote(backend_, cs.comm, stream, *cs.vote_staging, Vote{sig.proposal_hash(), fingerprint_, ok}, &verdict))
    return fail_comm(cs, rc, "the vote on a learned mask failed");
  sig.settle(verdict.unanimous());
  if (verdict.unanimous())
    SIEVE_INFO("collective proxy: learned a mask for %llu-element %s all-reduces on communicator %p (density %.3f); "
               "compacting", (unsigned long long)sig.plan()->count(), elem_type_name(sig.plan()->type()), cs.comm,
               sig.plan()->mask().density());
  else
    SIEVE_INFO("collective proxy: a learned mask was not adopted on communicator %p: %s", cs.comm,
               verdict.reason(why).c_str());
  return kResultSuccess;
}

// --- groups ----------------------------------------------------------------------------------

Proxy::GroupState& Proxy::group_state() {
  std::lock_guard lock(mutex_);
  return groups_[std::this_thread::get_id()];  // unordered_map references stay valid on insert
}

bool Proxy::in_group() { return group_state().depth > 0; }

int Proxy::after_collective(Call& call, int rc, const char* what, std::function<int()> work) {
  GroupState& g = group_state();
  if (g.depth > 0) {
    g.after.push_back(Deferred{call.state, call.stream, std::move(work), what, false, nullptr});
    return rc;
  }
  // A non-blocking communicator may return before its kernel is on the stream: anything that
  // depends on the collective waits until it is.
  if (rc == kResultInProgress)
    if (int wait = backend_.wait_enqueued(call.state->comm)) return wait;
  if (int w = work()) {
    SIEVE_WARN("collective proxy: %s failed (error %d) on communicator %p after its collective ran; the output of "
               "this call is not valid", what, w, call.state->comm);
    return w;
  }
  return kResultSuccess;
}

int Proxy::group_start() {
  const int rc = backend_.group_start();
  if (rc == kResultSuccess) ++group_state().depth;
  return rc;
}

int Proxy::run_deferred(GroupState& group, int group_rc) {
  std::vector<Deferred> after;
  after.swap(group.after);
  // kResultInProgress stays the answer unless something fails: collectives of the group that no
  // deferred work waited for may still be on their way to the streams, and the caller must poll.
  int rc = group_rc;
  // The group's collectives are launched: wait until each non-blocking communicator has them on
  // its streams, then enqueue what follows them. A failed launch leaves nothing to follow.
  std::unordered_set<CommState*> waited;
  for (Deferred& d : after) {
    std::lock_guard lock(d.state->mutex);
    CommState& cs = *d.state;
    if (d.table_vote || d.learned_vote) {
      if (cs.aborted || !enqueued(group_rc)) {
        cs.table_vote_scheduled = false;
        if (d.learned_vote) d.learned_vote->withdraw();
        continue;
      }
      Call call{d.state, d.stream};
      bool capture = false;
      if (int c = capturing(call, &capture)) {
        if (enqueued(rc)) rc = c;
        continue;
      }
      int v = kResultSuccess;
      if (capture) {  // votes wait for their result: not while the stream is captured
        cs.table_vote_scheduled = false;
        if (d.learned_vote) d.learned_vote->withdraw();
      } else if (d.table_vote) {
        v = vote_table(cs, d.stream);
      } else {
        v = vote_learned(cs, *d.learned_vote, d.stream);
      }
      if (v && enqueued(rc)) rc = v;
      continue;
    }
    if (!enqueued(group_rc) || cs.aborted) continue;
    if (group_rc == kResultInProgress && waited.insert(&cs).second) {
      if (int w = backend_.wait_enqueued(cs.comm)) {
        if (enqueued(rc)) rc = w;
        continue;
      }
    }
    if (int w = d.work()) {
      SIEVE_WARN("collective proxy: %s failed (error %d) on communicator %p after its collective ran; the output of "
                 "that call is not valid", d.what, w, cs.comm);
      if (enqueued(rc)) rc = w;
    }
  }
  return rc;
}

int Proxy::group_end() {
  GroupState& g = group_state();
  const int rc = backend_.group_end();
  if (g.depth == 0) return rc;
  if (--g.depth > 0) return rc;
  return run_deferred(g, rc);
}

int Proxy::group_simulate_end(void* sim_info) {
  GroupState& g = group_state();
  const int rc = backend_.group_simulate_end(sim_info);
  if (g.depth == 0 || --g.depth > 0) return rc;
  // Nothing of the group was launched: what follows its collectives is dropped with them, and the
  // votes it deferred wait for the next call, exactly as on every other rank.
  std::vector<Deferred> after;
  after.swap(g.after);
  for (Deferred& d : after) {
    std::lock_guard lock(d.state->mutex);
    if (d.table_vote) d.state->table_vote_scheduled = false;
    if (d.learned_vote) d.learned_vote->withdraw();
  }
  return rc;
}

void Proxy::warn_uncommitted(uint64_t count) {
  if (count < options_.rules.min_count || registry_.generation() == 0 || registry_.commit_epoch() != 0) return;
  if (!warned_uncommitted_.exchange(true))
    SIEVE_WARN("collective proxy: masks are published but were never committed, so every collective runs dense; "
               "call sieve_commit() (Python: sieve.commit()) on every rank after publishing");
}

}  // namespace sieve::plugin::proxy
