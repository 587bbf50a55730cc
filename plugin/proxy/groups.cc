// SPDX-License-Identifier: Apache-2.0
// NCCL groups as the proxy follows them: what a collective inside a group must do after it (gathers
// before the group's launch, scatters, records and votes after), run at the outermost ncclGroupEnd
// in call order, or dropped with the group by ncclGroupSimulateEnd.
#include <algorithm>
#include <mutex>
#include <vector>

#include "plugin/proxy/proxy.h"

namespace sieve::plugin::proxy {

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
  int rc = group_rc;
  // After the launch: what follows the collectives, in call order. kResultInProgress stays the
  // answer unless something fails: collectives that nothing waited for may still be on their way.
  std::vector<CommState*>& waited = ts.waited;
  // By index: nothing run here defers work of its own (this thread's group depth is 0 again), but an
  // append would not invalidate the loop either.
  ts.collecting_verdicts = true;
  for (size_t i = 0; i < ts.deferred.size(); ++i) {
    Deferred& d = ts.deferred[i];
    std::lock_guard lock(d.state->mutex);
    CommState& cs = *d.state;
    if (!enqueued(group_rc) || cs.failed.load()) {
      if (d.kind == Deferred::Kind::kLearnedVote) d.learned->withdraw();
      if (d.kind == Deferred::Kind::kCommit) release_vote(cs, *d.commit);
      if (d.kind == Deferred::Kind::kCommit && !cs.failed.load())
        fail_comm(cs, group_rc, "could not launch the group holding a commit's vote");
      continue;
    }
    if (group_rc == kResultInProgress && std::find(waited.begin(), waited.end(), &cs) == waited.end()) {
      waited.push_back(&cs);
      if (int w = backend_.wait_enqueued(cs.comm, cs.live)) {
        rc = fail_comm(cs, w, "waited for a group's collectives to reach their streams and");
        continue;
      }
    }
    if (int w = run_after(d); w && enqueued(rc)) rc = w;
  }
  ts.collecting_verdicts = false;
  if (!ts.verdicts.empty()) {
    // Each communicator's lock, as every step above took it (no other thread waits on this rank's).
    std::vector<std::unique_lock<std::mutex>> locks;
    for (const VerifyVerdict& v : ts.verdicts) locks.emplace_back(v.state->mutex);
    if (int w = share_verdicts(ts.verdicts); w && enqueued(rc)) rc = w;
  }
  ts.deferred.clear();  // both keep their capacity: no allocation on the next group
  waited.clear();
  return rc;
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
