// SPDX-License-Identifier: Apache-2.0
// NCCL groups as the proxy follows them: what a collective inside a group must do after it (gathers
// before the group's launch, scatters, records and votes after), run at the outermost ncclGroupEnd
// in call order, or dropped with the group by ncclGroupSimulateEnd.
#include <algorithm>
#include <mutex>
#include <vector>

#include "plugin/proxy/proxy.h"

namespace sieve::plugin::proxy {

namespace {

// Several communicators' locks, always in one order (by address), whatever order a group put them
// in: two groups of one thread never take them in opposite orders.
template <typename States> std::vector<std::unique_lock<std::mutex>> lock_all(States& states) {
  std::sort(states.begin(), states.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto* state : states) locks.emplace_back(state->mutex);
  return locks;
}

}  // namespace

int Proxy::after(Call& call, int rc, Deferred&& work) {
  ThreadState& ts = thread_state();
  if (ts.depth > 0) {
    ts.deferred.push_back(std::move(work));
    return rc;
  }
  // A non-blocking communicator may return before its kernel is on the stream: anything that
  // depends on the collective waits until it is.
  if (rc == kResultInProgress)
    if (int wait = backend_.wait_enqueued(call.state->comm, call.state->live))
      return fail_comm(*call.state, wait, "waited for a collective to reach its stream and");
  if (int w = run_after(work)) return w;
  return kResultSuccess;
}

int Proxy::group_start() {
  const int rc = backend_.group_start();
  if (rc == kResultSuccess) ++thread_state().depth;
  return rc;
}

void Proxy::close_groups(ThreadState& ts) {
  for (const std::shared_ptr<CommState>& state : ts.grouped) {
    std::lock_guard lock(state->mutex);
    state->group_open = false;
  }
  ts.grouped.clear();  // keeps its capacity: no allocation on the next group
}

int Proxy::run_group_end(ThreadState& ts) {
  close_groups(ts);
  // Before the launch: the gathers of the group's compacted collectives, so that they read their
  // inputs after every piece of stream work the trainer issued inside the group, as the dense
  // collectives (launched by the group's end) do.
  for (Deferred& d : ts.deferred) {
    if (d.kind != Deferred::Kind::kCompaction) continue;
    std::lock_guard lock(d.state->mutex);
    if (d.state->failed.load()) continue;
    if (int rc = gather_kept(*d.state, d.compaction, d.stream))
      fail_comm(*d.state, rc, "the gather of a compacted collective failed");
  }
  const int group_rc = backend_.group_end();
  // After the launch: what follows the collectives, per communicator in call order (the same on
  // every rank of it, whatever order this thread put communicators in). kResultInProgress stays the
  // answer unless something fails: collectives that nothing waited for may still be on their way.
  int rc = group_rc;
  ts.lanes.clear();  // keeps its capacity: no allocation on the next group
  for (size_t i = 0; i < ts.deferred.size(); ++i) {
    CommState* cs = ts.deferred[i].state.get();
    if (std::none_of(ts.lanes.begin(), ts.lanes.end(), [cs](const Lane& l) { return l.state == cs; }))
      ts.lanes.push_back(Lane{cs, i});
  }
  // Nothing run here defers work of its own (this thread's group depth is 0 again). Rounds: each
  // communicator runs until its next agreement needs an exchange; then every such exchange is
  // issued in one NCCL group, so that no rank waits on one communicator while another waits on
  // another. Each communicator's sequence of exchanges depends only on agreed words, so every
  // rank's round k issues the same exchanges on it.
  ts.collecting_verdicts = true;
  for (;;) {
    bool pending = false;
    for (Lane& lane : ts.lanes) {
      advance(ts, lane, group_rc, &rc);
      pending = pending || lane.step.exchange;
    }
    if (!pending) break;
    exchange_round(ts, &rc);
  }
  ts.collecting_verdicts = false;
  if (!ts.verdicts.empty()) {
    // Each communicator's lock, as every step above took it (no other thread waits on this rank's).
    std::vector<CommState*> held;
    for (const VerifyVerdict& v : ts.verdicts) held.push_back(v.state);
    const auto locks = lock_all(held);
    if (int w = share_verdicts(ts.verdicts); w && enqueued(rc)) rc = w;
  }
  ts.deferred.clear();  // keeps its capacity
  return rc;
}

void Proxy::advance(ThreadState& ts, Lane& lane, int group_rc, int* rc) {
  CommState& cs = *lane.state;
  std::lock_guard lock(cs.mutex);
  while (lane.next < ts.deferred.size()) {
    Deferred& d = ts.deferred[lane.next];
    if (d.state.get() != &cs) {
      ++lane.next;
      continue;
    }
    const bool agreement = d.kind == Deferred::Kind::kCommit || d.kind == Deferred::Kind::kLearnedVote;
    if (!enqueued(group_rc) || cs.failed.load()) {
      if (d.kind == Deferred::Kind::kLearnedVote) d.learned->withdraw();
      if (d.kind == Deferred::Kind::kCommit) release_vote(cs, *d.commit);
      if (d.kind == Deferred::Kind::kCommit && !cs.failed.load())
        fail_comm(cs, group_rc, "could not launch the group holding a commit's vote");
      lane.step = ExchangeStep();
      lane.resume = false;
      ++lane.next;
      continue;
    }
    if (group_rc == kResultInProgress && !lane.waited) {
      lane.waited = true;
      if (int w = backend_.wait_enqueued(cs.comm, cs.live))
        *rc = fail_comm(cs, w, "waited for a group's collectives to reach their streams and");
      continue;  // a failure is this item's, on the next pass
    }
    int w = kResultSuccess;
    if (!agreement) {
      w = run_after(d);
    } else if (d.kind == Deferred::Kind::kCommit) {
      w = step_commit(cs, d.stream, *d.commit, &lane.step);
    } else if (!lane.resume) {
      Waiting waiting(cs, "a learned-mask vote");
      propose_learned(cs, *d.learned, &d.vote, &d.why, &lane.step);
    } else {
      settle_learned(cs, *d.learned, d.vote, d.why);
      lane.step = ExchangeStep();
    }
    lane.resume = false;
    if (!w && lane.step.exchange) {
      lane.stream = d.stream;
      return;  // until this round's exchanges have run
    }
    if (w && enqueued(*rc)) *rc = w;
    ++lane.next;
  }
}

void Proxy::exchange_round(ThreadState& ts, int* rc) {
  // Each communicator's lock, as its steps took it (no other thread uses this rank's communicators
  // of the group now: NCCL requires that of its callers).
  std::vector<CommState*> held;
  for (Lane& lane : ts.lanes)
    if (lane.step.exchange) held.push_back(lane.state);
  const size_t pending = held.size();
  const auto locks = lock_all(held);
  for (CommState* cs : held)
    cs->waiting_for.store("an agreement's exchange at a group's end", std::memory_order_relaxed);
  const bool grouped = pending > 1;
  const int start_rc = grouped ? backend_.group_start() : kResultSuccess;
  for (Lane& lane : ts.lanes)
    if (lane.step.exchange)
      lane.issued = start_rc ? start_rc
                             : backend_.exchange_in(*lane.step.exchange, nullptr, lane.step.count, lane.step.width,
                                                    lane.state->comm, lane.stream);
  const int group_rc = grouped && !start_rc ? backend_.group_end() : kResultSuccess;
  for (Lane& lane : ts.lanes) {
    if (!lane.step.exchange) continue;
    CommState& cs = *lane.state;
    const ExchangeStep& step = lane.step;
    int r = enqueued(lane.issued) ? group_rc : lane.issued;
    if (enqueued(r) && (r == kResultInProgress || lane.issued == kResultInProgress))
      r = backend_.wait_enqueued(cs.comm, cs.live);
    if (!r) r = backend_.exchange_out(*step.exchange, nullptr, step.count, step.width, lane.stream);
    if (!r) r = backend_.wait_exchange(*step.exchange, cs.comm, cs.live);
    cs.waiting_for.store(nullptr, std::memory_order_relaxed);
    if (r) {
      // The suspended item sees the failure on the next pass and withdraws.
      const int failed = fail_comm(cs, r, "could not complete an agreement's exchange at a group's end");
      if (enqueued(*rc)) *rc = failed;
      lane.step = ExchangeStep();
      continue;
    }
    lane.resume = true;
  }
}

int Proxy::group_end() {
  ThreadState& ts = thread_state();
  if (ts.depth == 0) return backend_.group_end();
  if (--ts.depth > 0) return backend_.group_end();
  return run_group_end(ts);
}

int Proxy::group_simulate_end(void* sim_info) {
  ThreadState& ts = thread_state();
  const int rc = backend_.group_simulate_end(sim_info);
  if (ts.depth == 0 || --ts.depth > 0) return rc;
  // Nothing of the group was launched: what follows its collectives is dropped with them, on every
  // rank alike (the group is the trainer's program). A commit in it never happened.
  close_groups(ts);
  for (Deferred& d : ts.deferred) {
    std::lock_guard lock(d.state->mutex);
    if (d.kind == Deferred::Kind::kLearnedVote) d.learned->withdraw();
    if (d.kind == Deferred::Kind::kCommit) withdraw_commit(*d.state, *d.commit);
  }
  ts.deferred.clear();
  return rc;
}

}  // namespace sieve::plugin::proxy
