// SPDX-License-Identifier: Apache-2.0
// Commits and learned-mask votes: the only collectives the proxy issues of its own accord, each at
// a point of the communicator's sequence that the trainer's program fixes (its commit call) or that
// the outputs of earlier collectives fix (a learned mask's stability), never a process-wide state.
#include <algorithm>
#include <iterator>

#include "net/log.h"
#include "plugin/proxy/proxy.h"

namespace sieve::plugin::proxy {

struct PendingCommit {
  std::unique_ptr<TableCommit> table;
  const void* token = nullptr;  // the binding's: its thread reads the verdict with commit_outcome()
  // Its vote's staging: the communicator's, or its own when another commit of the same group holds
  // that one until the group's end (one staging for both: each read the other's verdict).
  Exchange* vote = nullptr;
  std::unique_ptr<Exchange> own;
  bool read = false;  // its first verdict was read: later steps resume the table's agreement
};

namespace {

std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>> reusable_plans(
    const std::unordered_map<uintptr_t, ActiveEntry>& active) {
  std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>> out;
  for (const auto& [base, entry] : active)
    if (entry.plan) out.emplace(entry.source->id(), entry.plan);
  return out;
}

void reuse_shape_plans(const std::vector<ActiveEntry>& shape_masks,
                       std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>>* out) {
  for (const ActiveEntry& entry : shape_masks)
    if (entry.plan) out->emplace(entry.source->id(), entry.plan);
}

}  // namespace

void Proxy::arm_commit(const void* token, uint32_t flags) {
  ThreadState& ts = thread_state();
  ts.armed_token = token;
  ts.armed_flags = flags;
}

bool Proxy::commit_outcome(const void* token, CommitOutcome* out) {
  ThreadState& ts = thread_state();
  if (!token || ts.outcome_token != token) return false;
  *out = ts.outcome;
  return true;
}

int Proxy::commit(Comm comm, Stream stream, uint32_t flags, CommitOutcome* outcome) {
  CommitOutcome ignored;
  if (!outcome) outcome = &ignored;
  Call call;
  if (int rc = begin_call(comm, stream, &call)) return rc;
  return run_commit(call, flags, nullptr, outcome);
}

int Proxy::run_commit(Call& call, uint32_t flags, void* token, CommitOutcome* outcome) {
  CommState& cs = *call.state;
  Waiting waiting(cs, "a commit's vote");
  *outcome = CommitOutcome();
  outcome->commit = cs.commits + 1;
  bool capture = false;
  if (int rc = capturing(call, &capture)) return rc;
  if (capture) {
    // A vote cannot be waited for in a graph, and a graph would replay it without the proxy: a
    // captured commit is refused and changes nothing, on every rank that captures it (all of them:
    // capture is the trainer's program). The binding's token is the trainer's own collective: it
    // goes into the graph as it is.
    outcome->reason = "a commit cannot be captured into a CUDA graph; issue it outside capture";
    SIEVE_WARN("collective proxy: %s (communicator %p); nothing changes", outcome->reason.c_str(), cs.comm);
    if (token) return backend_.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, cs.comm, call.stream);
    return kResultSuccess;
  }
  if (!cs.vote && backend_.create_exchange(kVoteBytes, &cs.vote)) {
    // This rank cannot vote. The binding's own all-reduce still carries its "no proxy" words, so
    // the others refuse; a C caller's commit has nothing to send, and its peers must not wait.
    if (token) return backend_.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, cs.comm, call.stream);
    return fail_comm(cs, kResultCudaError, "no device memory for a commit's vote");
  }
  if (options_.verify && !cs.captured_verdict) {  // made here: a graph may not allocate
    std::unique_ptr<Exchange> fixed;
    if (backend_.create_exchange(kVoteBytes, &fixed)) {
      if (token)
        return backend_.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, cs.comm, call.stream);
      return fail_comm(cs, kResultCudaError, "no device memory for SIEVE_PROXY_VERIFY's vote");
    }
    write_vote(Vote{0, fingerprint_, Refusal::kNone}, fixed->host());
    cs.captured_verdict = std::move(fixed);
  }
  // Verdicts and learned votes have staging of their own: a group's end may share them between a
  // commit's vote and its verdict.
  if ((options_.verify && !cs.verdict_vote && backend_.create_exchange(kVoteBytes, &cs.verdict_vote)) ||
      (options_.track == config::Track::kOn && !cs.learned_vote &&
       backend_.create_exchange(kVoteBytes, &cs.learned_vote))) {
    if (token) return backend_.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, cs.comm, call.stream);
    return fail_comm(cs, kResultCudaError, "no device memory for the proxy's votes");
  }
  auto pending = std::make_shared<PendingCommit>();
  pending->token = token;
  pending->vote = cs.vote.get();
  if (cs.vote_held) {
    if (backend_.create_exchange(kVoteBytes, &pending->own)) {
      if (token)
        return backend_.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, cs.comm, call.stream);
      return fail_comm(cs, kResultCudaError, "no device memory for a commit's vote");
    }
    pending->vote = pending->own.get();
  }
  auto reusable = reusable_plans(cs.active);
  reuse_shape_plans(cs.shape_masks, &reusable);
  const Refusal veto = options_.enabled ? Refusal::kNone : Refusal::kProxyOff;
  AgreementContext ctx{backend_,     cs.comm,   call.stream,     cs.live,   options_.rules,
                       fingerprint_, cs.nranks, options_.verify, &reusable, veto};
  int collective_rc = kResultSuccess;
  if (int rc = TableCommit::begin(ctx, registry_.snapshot(comm_scope(cs.comm)), flags, *pending->vote, token,
                                  &pending->table, &collective_rc))
    return fail_comm(cs, rc, "could not issue a commit's vote");
  note(cs, CallKind::kCommit, ReduceOp::kMax, DType::kI64, CallPath::kAgreement, kVoteWords);
  if (thread_state().depth > 0) {
    if (pending->vote == cs.vote.get()) cs.vote_held = true;
    outcome->state = CommitOutcome::State::kPending;
    Deferred d{Deferred::Kind::kCommit, call.state, call.stream};
    d.commit = pending;
    return after(call, collective_rc, std::move(d));
  }
  if (collective_rc == kResultInProgress)
    if (int rc = backend_.wait_enqueued(cs.comm, cs.live)) return fail_comm(cs, rc, "waited for a commit's vote and");
  if (int rc = finish_commit(cs, call.stream, *pending)) return rc;
  *outcome = thread_state().outcome;
  return kResultSuccess;
}

int Proxy::finish_commit(CommState& cs, Stream stream, PendingCommit& pending) {
  ExchangeStep next;
  for (;;) {
    if (int rc = step_commit(cs, stream, pending, &next)) return rc;
    if (!next.exchange) return kResultSuccess;
    if (int rc = exchange_now(cs, stream, next)) {
      release_vote(cs, pending);
      return fail_comm(cs, rc, "could not complete a commit's vote");
    }
  }
}

int Proxy::step_commit(CommState& cs, Stream stream, PendingCommit& pending, ExchangeStep* next) {
  Waiting waiting(cs, "a commit's vote");  // also when it comes at a group's end
  auto reusable = reusable_plans(cs.active);
  reuse_shape_plans(cs.shape_masks, &reusable);
  AgreementContext ctx{backend_,     cs.comm,   stream,          cs.live,   options_.rules,
                       fingerprint_, cs.nranks, options_.verify, &reusable, Refusal::kNone};
  TableAgreement agreement;
  const int rc = pending.read ? pending.table->resume(ctx, *pending.vote, next, &agreement)
                              : pending.table->read(ctx, *pending.vote, next, &agreement);
  pending.read = true;
  if (!rc && next->exchange) return kResultSuccess;
  *next = ExchangeStep();
  release_vote(cs, pending);
  if (rc) return fail_comm(cs, rc, "could not complete a commit's vote");
  CommitOutcome outcome;
  apply(cs, agreement, &outcome);
  ThreadState& ts = thread_state();
  ts.outcome_token = pending.token;
  ts.outcome = outcome;
  return kResultSuccess;
}

int Proxy::exchange_now(CommState& cs, Stream stream, const ExchangeStep& step) {
  int rc = backend_.exchange_in(*step.exchange, nullptr, step.count, step.width, cs.comm, stream);
  if (rc == kResultInProgress) rc = backend_.wait_enqueued(cs.comm, cs.live);
  if (!rc) rc = backend_.exchange_out(*step.exchange, nullptr, step.count, step.width, stream);
  if (!rc) rc = backend_.wait_exchange(*step.exchange, cs.comm, cs.live);
  return rc;
}

void Proxy::release_vote(CommState& cs, PendingCommit& pending) {
  if (pending.vote == cs.vote.get()) cs.vote_held = false;
  pending.vote = nullptr;
}

void Proxy::withdraw_commit(CommState& cs, PendingCommit& pending) {
  release_vote(cs, pending);
  ThreadState& ts = thread_state();
  ts.outcome_token = pending.token;
  ts.outcome = CommitOutcome();
  ts.outcome.commit = cs.commits + 1;
  ts.outcome.reason = "its group was only simulated (ncclGroupSimulateEnd): nothing was committed";
}

void Proxy::apply(CommState& cs, TableAgreement& agreement, CommitOutcome* outcome) {
  const uint64_t number = ++cs.commits;
  collect_graph_counts(cs);  // the host waited for the vote: a point to take in what replays counted
  // Plans a captured graph uses stay alive for its replays (the graph holds them, or, where it
  // cannot, the communicator does); warn when such a plan's mask is gone.
  auto keep_captured = [&](const ActiveEntry& entry) {
    if (!entry.plan || !entry.plan->captured) return;
    // Once each: a plan a commit keeps (reused from the last table) would otherwise be added again
    // at every commit, for good.
    if (entry.plan->kept_for_good &&
        std::find(cs.graph_plans.begin(), cs.graph_plans.end(), entry.plan) == cs.graph_plans.end())
      cs.graph_plans.push_back(entry.plan);
    bool kept = false;
    for (const ActiveEntry& e : agreement.entries) kept = kept || e.plan == entry.plan;
    if (!kept)
      SIEVE_WARN(
          "collective proxy: a CUDA graph compacts with mask %llu (%s), which commit %llu replaced or removed; "
          "replays of that graph still use the old mask: capture it again",
          (unsigned long long)entry.source->id(), compress::mask_target_name(entry.source->collective()),
          (unsigned long long)number);
  };
  for (const auto& [base, entry] : cs.active) keep_captured(entry);
  for (const ActiveEntry& entry : cs.shape_masks) keep_captured(entry);
  cs.active.clear();
  cs.shape_masks.clear();
  cs.ambiguous.clear();
  cs.agreed = agreement.activated;
  cs.table_hash = agreement.activated ? agreement.hash : 0;
  *outcome = CommitOutcome();
  outcome->commit = number;
  if (!agreement.activated) {
    // Learning needs agreed settings: what was learned under the last agreement goes too. A retired
    // signature stays retired: its pattern failed on every rank alike, and forgetting that would
    // learn it, and drop its values, all over again after the next agreed commit.
    if (options_.track == config::Track::kOn)
      for (auto it = cs.learned.begin(); it != cs.learned.end();)
        it = it->second->retired() ? std::next(it) : cs.learned.erase(it);
    add(stats_.tables_refused, 1);
    outcome->reason = agreement.reason;
    SIEVE_WARN(
        "collective proxy: commit %llu was refused on communicator %p: %s; from this point every rank runs "
        "its collectives dense",
        (unsigned long long)number, cs.comm, agreement.reason.c_str());
    return;
  }
  for (ActiveEntry& e : agreement.entries) {
    outcome->compacting += e.plan ? 1 : 0;
    ++outcome->masks;
    if (!e.source->collective()) cs.active[e.source->base()] = std::move(e);
    else cs.shape_masks.push_back(std::move(e));
  }
  // A collective's mask is certain when no other mask of its shape differs from it: the agreed
  // masks, the same on every rank (under a union each rank's own differ by design, and a rank that
  // found its own two masks equal would compact a call that another rank runs dense).
  cs.ambiguous.assign(cs.shape_masks.size(), false);
  for (size_t i = 0; i < cs.shape_masks.size(); ++i)
    for (size_t j = 0; j < cs.shape_masks.size(); ++j) {
      const compress::PublishedMask &a = *cs.shape_masks[i].source, &b = *cs.shape_masks[j].source;
      if (i != j && a.collective() == b.collective() && a.count() == b.count() && a.dtype() == b.dtype() &&
          !(*cs.shape_masks[i].agreed == *cs.shape_masks[j].agreed))
        cs.ambiguous[i] = true;
    }
  outcome->state = CommitOutcome::State::kActivated;
  add(stats_.tables_activated, 1);
  SIEVE_INFO(
      "collective proxy: commit %llu is active on communicator %p (%d ranks): %llu masks, %llu of them "
      "compact%s",
      (unsigned long long)number, cs.comm, cs.nranks, (unsigned long long)outcome->masks,
      (unsigned long long)outcome->compacting, options_.track == config::Track::kOn ? "; learning masks" : "");
}

int Proxy::vote_learned(CommState& cs, LearnedSignature& sig, Stream stream) {
  Waiting waiting(cs, "a learned-mask vote");
  Vote mine;
  std::string why;
  ExchangeStep step;
  propose_learned(cs, sig, &mine, &why, &step);
  if (int rc = exchange_now(cs, stream, step))
    return fail_comm(cs, rc, "could not complete the vote on a learned mask");
  settle_learned(cs, sig, mine, why);
  return kResultSuccess;
}

void Proxy::propose_learned(CommState& cs, LearnedSignature& sig, Vote* mine, std::string* why, ExchangeStep* next) {
  const bool ok = options_.enabled && sig.prepare_proposal(backend_, why);
  *mine = Vote{sig.proposal_hash(), fingerprint_, ok ? Refusal::kNone : Refusal::kCouldNotPrepare};
  write_vote(*mine, cs.learned_vote->host());
  note(cs, CallKind::kVote, ReduceOp::kMax, DType::kI64, CallPath::kAgreement, kVoteWords);
  *next = ExchangeStep{cs.learned_vote.get(), kVoteWords, 8};
}

void Proxy::settle_learned(CommState& cs, LearnedSignature& sig, const Vote& mine, const std::string& why) {
  const Verdict verdict = read_verdict(mine, cs.learned_vote->host());
  sig.settle(verdict.unanimous());
  if (verdict.unanimous())
    SIEVE_INFO(
        "collective proxy: learned a mask for %llu-element %s all-reduces on communicator %p (density %.3f); "
        "compacting",
        (unsigned long long)sig.count(), dtype_name(sig.type()), cs.comm, sig.plan()->mask().density());
  else
    SIEVE_INFO("collective proxy: a learned mask was not adopted on communicator %p: %s", cs.comm,
               verdict.reason(why).c_str());
}

}  // namespace sieve::plugin::proxy
