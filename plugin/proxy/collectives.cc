// SPDX-License-Identifier: Apache-2.0
// What each interposed collective runs: dense, compacted on an agreed published mask, or on a
// learned one. Every path that compacts was decided from agreed inputs only (proxy.h); from the
// decision on, a local failure aborts the communicator instead of skipping or changing the collective.
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "net/log.h"
#include "plugin/proxy/proxy.h"

namespace sieve::plugin::proxy {

namespace {

bool reduces(ReduceOp op) { return op != ReduceOp::kOther; }

// The relative rounding unit of a type, for SIEVE_PROXY_VERIFY's tolerance.
double unit_roundoff(DType type) {
  switch (type) {
    case DType::kF16: return 1.0 / 1024;
    case DType::kBF16: return 1.0 / 128;
    case DType::kF32: return std::numeric_limits<float>::epsilon();
    default: return std::numeric_limits<double>::epsilon();
  }
}

}  // namespace

// --- matching --------------------------------------------------------------------------------

const ActiveEntry* Proxy::match(CommState& cs, const void* base, uint64_t count, DType type) {
  auto it = cs.active.find(reinterpret_cast<uintptr_t>(base));
  if (it == cs.active.end()) return nullptr;
  const ActiveEntry& e = it->second;
  if (e.source->count() != count || type != e.source->dtype()) {
    if (cs.warned.insert(it->first).second)
      SIEVE_WARN(
          "collective proxy: a collective on %p (%llu x %s) does not match the mask committed there "
          "(%llu x %s); it runs dense",
          base, (unsigned long long)count, dtype_name(type), (unsigned long long)e.source->count(),
          compress::dtype_name(e.source->dtype()));
    return nullptr;
  }
  return &e;
}

const ActiveEntry* Proxy::shape_mask(CommState& cs, Collective collective, uint64_t count, DType type) {
  // Which of several masks of one shape a call belongs to cannot be known for certain (a step may
  // skip a collective, or repeat one): such a call runs dense on every rank, never on a guess.
  for (size_t i = 0; i < cs.shape_masks.size(); ++i) {
    const ActiveEntry& e = cs.shape_masks[i];
    if (e.source->collective() != collective || e.source->count() != count || type != e.source->dtype()) continue;
    if (!cs.ambiguous[i]) return &e;
    if (!cs.warned_ambiguous) {
      cs.warned_ambiguous = true;
      SIEVE_WARN(
          "collective proxy: communicator %p has several different %s masks of %llu x %s; a call of that "
          "shape cannot say which one is its own, so it runs dense (publish one mask per shape, or the "
          "same mask for every collective of a shape)",
          cs.comm, compress::mask_target_name(collective), (unsigned long long)count, dtype_name(type));
    }
    return nullptr;
  }
  return nullptr;
}

bool Proxy::whole_count(uint64_t per_rank, int nranks, uint64_t* count) const {
  if (per_rank > std::numeric_limits<uint64_t>::max() / uint64_t(nranks)) return false;
  *count = per_rank * uint64_t(nranks);
  return *count >= options_.rules.min_count;
}

void Proxy::warn_uncommitted(CommState& cs, uint64_t count) {
  if (warned_uncommitted_.load(std::memory_order_relaxed) || cs.commits != 0 || count < options_.rules.min_count ||
      registry_.size() == 0)
    return;
  if (!warned_uncommitted_.exchange(true))
    SIEVE_WARN(
        "collective proxy: masks are published but communicator %p has had no commit, so its collectives run "
        "dense; issue sieve_comm_commit() (Python: sieve.commit(group)) on every rank of it after publishing",
        cs.comm);
}

int Proxy::dense(Collective coll, const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm,
                 Stream stream) {
  add(stats_.collectives_dense, 1);
  switch (coll) {
    case Collective::kAllReduce: return backend_.all_reduce(send, recv, count, type, op, comm, stream);
    case Collective::kReduceScatter: return backend_.reduce_scatter(send, recv, count, type, op, comm, stream);
    case Collective::kAllGather: return backend_.all_gather(send, recv, count, type, comm, stream);
  }
  return kResultInternalError;
}

// --- the three collectives -------------------------------------------------------------------

void Proxy::premul_sum_created(Comm comm, int32_t handle) {
  std::shared_ptr<CommState> state;
  if (enter(comm, &state)) return;  // NCCL just created it on this communicator: cannot fail here
  std::lock_guard lock(state->mutex);
  state->premul_sums.insert(handle);
}

void Proxy::premul_sum_destroyed(Comm comm, int32_t handle) {
  std::shared_ptr<CommState> state;
  if (enter(comm, &state)) return;
  std::lock_guard lock(state->mutex);
  state->premul_sums.erase(handle);
}

bool Proxy::premul_sum_known(Comm comm, int32_t handle) {
  std::shared_ptr<CommState> state;
  if (enter(comm, &state)) return false;
  std::lock_guard lock(state->mutex);
  return state->premul_sums.count(handle) != 0;
}

int Proxy::pass_through(Comm comm, CallKind kind, uint64_t count) {
  Call call;
  if (int rc = begin_call(comm, nullptr, &call)) return rc;
  note(*call.state, kind, ReduceOp::kOther, std::nullopt, CallPath::kDense, count);
  add(stats_.collectives_dense, 1);
  return kResultSuccess;
}

int Proxy::all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm, Stream stream,
                      Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  ThreadState& ts = thread_state();
  const bool token = ts.armed_token && send == ts.armed_token && recv == send && count == kVoteWords &&
                     type == DType::kI64 && op == ReduceOp::kMax;
  Call call;
  if (int rc = begin_call(comm, stream, &call)) return rc;
  CommState& cs = *call.state;
  if (token) {
    ts.armed_token = nullptr;
    *path = Path::kCommit;
    CommitOutcome outcome;
    const int rc = run_commit(call, ts.armed_flags, recv, &outcome);
    if (outcome.state != CommitOutcome::State::kPending) {
      ts.outcome_token = recv;
      ts.outcome = outcome;
    }
    return rc;
  }
  const bool eligible =
      options_.enabled && compactable(type) && reduces(op) && count >= options_.rules.min_count && send && recv;
  if (eligible && cs.agreed) {
    *path = Path::kDense;
    if (const ActiveEntry* e = match(cs, send, count, type); e && e->plan && e->plan->whole()) {
      Compaction c{Collective::kAllReduce, e->plan, send, recv, op};
      *path = Path::kCompactPublished;
      return compact(call, c, path);
    }
  }
  // Observing issues nothing and needs no agreement; learning needs an agreed commit's settings.
  const bool learning =
      options_.track == config::Track::kObserve || (cs.agreed && options_.track == config::Track::kOn);
  if (eligible && learning && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    bool capture = false;
    if (int rc = capturing(call, &capture)) return rc;
    if (!capture) return learned_all_reduce(call, send, recv, count, type, op, path);
    // A learned call reads a record on the host and may vote: neither can happen in a graph, and
    // another rank may issue this very call eagerly (NCCL allows it) and compact it or vote. No
    // captured call can be made to match that, so capture of a learned signature is refused, the
    // same way on whichever rank captures it: loudly, by an abort, never by a silent dense run.
    if (options_.track == config::Track::kOn)
      return fail_comm(cs, kResultInvalidUsage,
                       "an all-reduce that SIEVE_TRACK=on learns was captured into a CUDA graph (a learned mask "
                       "cannot be captured; capture with SIEVE_TRACK=off or publish the masks)");
  }
  if (eligible) warn_uncommitted(cs, count);
  note(cs, CallKind::kAllReduce, op, type, CallPath::kDense, count);
  return dense(Collective::kAllReduce, send, recv, count, type, op, comm, stream);
}

int Proxy::reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                          Stream stream, Path* path) {
  return sharded(Collective::kReduceScatter, send, recv, recv_count, type, op, comm, stream, path);
}

int Proxy::all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream stream,
                      Path* path) {
  return sharded(Collective::kAllGather, send, recv, send_count, type, ReduceOp::kSum, comm, stream, path);
}

// Reduce-scatter and all-gather: `per_rank` elements of each rank's shard of the whole buffer. The
// mask describes the whole buffer: the reduce-scatter's input, the all-gather's output.
int Proxy::sharded(Collective coll, const void* send, void* recv, uint64_t per_rank, DType type, ReduceOp op, Comm comm,
                   Stream stream, Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  Call call;
  if (int rc = begin_call(comm, stream, &call)) return rc;
  CommState& cs = *call.state;
  const bool gather = coll == Collective::kAllGather;
  uint64_t count = 0;
  if (cs.agreed && options_.enabled && compactable(type) && reduces(op) && whole_count(per_rank, cs.nranks, &count) &&
      send && recv) {
    *path = Path::kDense;
    const ActiveEntry* e = match(cs, gather ? recv : send, count, type);
    if (!e) e = shape_mask(cs, coll, count, type);
    if (e && e->plan && !e->plan->shards().empty()) {
      Compaction c{coll, e->plan, send, recv, op};
      *path = Path::kCompactPublished;
      return compact(call, c, path);
    }
  }
  note(cs, call_kind(coll), gather ? ReduceOp::kOther : op, type, CallPath::kDense, per_rank);
  return dense(coll, send, recv, per_rank, type, op, comm, stream);
}

// --- compaction ------------------------------------------------------------------------------

int Proxy::compact(Call& call, Compaction& c, Path* path) {
  CommState& cs = *call.state;
  EntryPlan& plan = *c.plan;
  const uint64_t count = plan.count(), per_rank = count / uint64_t(cs.nranks);
  const uint64_t dense_count = c.coll == Collective::kAllReduce ? count : per_rank;
  ThreadState& ts = thread_state();
  bool capture = false;
  if (int rc = capturing(call, &capture)) return rc;
  if (ts.depth > 0) {
    // The communicator's group, not the thread's: a rank whose trainer issues one step from another
    // thread numbers its groups on this communicator as every other rank does.
    if (!cs.group_open) {
      cs.group_open = true;
      ++cs.group_serial;
      ts.grouped.push_back(call.state);
    }
    if (plan.group_serial == cs.group_serial) {
      // The plan's one compact buffer already serves a collective of this group (one send buffer
      // read twice): this one runs dense, on every rank alike.
      *path = Path::kDense;
      note(cs, call_kind(c.coll), c.op, plan.type(), CallPath::kDense, dense_count);
      const int rc = dense(c.coll, c.send, c.recv, dense_count, plan.type(), c.op, cs.comm, call.stream);
      if (!c.learned || !enqueued(rc)) return rc;
      Deferred d{Deferred::Kind::kRecord, call.state, call.stream};
      d.learned = c.learned;
      d.record = c.record;
      d.output = c.recv;
      return after(call, rc, std::move(d));
    }
    plan.group_serial = cs.group_serial;
  }
  // The dense twin is issued whether or not this rank captures (another rank may issue the same
  // call eagerly, and both must issue the same collectives); only the comparison, which waits for
  // results, is left out of a graph.
  const bool twin = cs.agreed && options_.verify;
  if (capture) {
    // What the graph's replays use lives as long as the graph: bounded by the graphs alive, as an
    // eager plan is bounded by the table. Where the backend cannot tie it to the graph, for good.
    plan.captured = true;
    const bool held = backend_.keep_for_graph(call.stream, c.plan) &&
                      (!twin || backend_.keep_for_graph(call.stream, cs.captured_verdict));
    if (!held) {
      plan.kept_for_good = true;
      cs.captured.store(true, std::memory_order_release);
    }
    if (plan.pruned_nonzeros()) {
      std::lock_guard lock(cs.graph_mutex);
      bool known = false;
      for (const std::weak_ptr<EntryPlan>& p : cs.graph_counted) known = known || p.lock() == c.plan;
      if (!known) cs.graph_counted.push_back(c.plan);
    }
  }
  c.verify = twin && !capture;
  c.verify_captured = twin && capture;
  if (twin) {
    const int rc = dense(c.coll, c.send, plan.verify_buffer(), c.coll == Collective::kAllReduce ? count : per_rank,
                         plan.type(), c.op, cs.comm, call.stream);
    if (!enqueued(rc)) return rc;
  }
  if (ts.depth == 0)
    if (int rc = gather_kept(cs, c, call.stream))
      return fail_comm(cs, rc, "the gather of a compacted collective failed");
  const uint64_t width = plan.shard_width();
  int rc = kResultSuccess;
  switch (c.coll) {
    case Collective::kAllReduce:
      // Nothing kept and no flag: every rank knows the result is all zeros, so no collective is needed.
      if (plan.nnz() > 0 || c.learned)
        rc = backend_.all_reduce(plan.compact(), plan.compact(), plan.nnz() + (c.learned ? 1 : 0), plan.type(), c.op,
                                 cs.comm, call.stream);
      break;
    case Collective::kReduceScatter:
      rc = backend_.reduce_scatter(plan.compact(), plan.compact_at(uint64_t(cs.rank) * width), width, plan.type(), c.op,
                                   cs.comm, call.stream);
      break;
    case Collective::kAllGather:
      rc = backend_.all_gather(plan.compact_at(uint64_t(cs.rank) * width), plan.compact(), width, plan.type(), cs.comm,
                               call.stream);
      break;
  }
  if (!enqueued(rc)) return rc;
  c.seq = cs.history.last_seq() + 1;
  note(cs, call_kind(c.coll), c.op, plan.type(), c.learned ? CallPath::kCompactLearned : CallPath::kCompactPublished,
       c.coll == Collective::kAllReduce ? plan.nnz() + (c.learned ? 1 : 0) : width);
  add(stats_.collectives_compacted, 1);
  if (ts.depth > 0) {
    Deferred d{Deferred::Kind::kCompaction, call.state, call.stream};
    d.compaction = std::move(c);
    ts.deferred.push_back(std::move(d));
    return rc;
  }
  // A non-blocking communicator may return before its kernel is on the stream: the scatter waits.
  if (rc == kResultInProgress)
    if (int wait = backend_.wait_enqueued(cs.comm, cs.live))
      return fail_comm(cs, wait, "waited for a collective to reach its stream and");
  return scatter_kept(cs, c, call.stream);
}

int Proxy::gather_kept(CommState& cs, const Compaction& c, Stream stream) {
  EntryPlan& plan = *c.plan;
  const size_t es = plan.element_size();
  const uint64_t width = plan.shard_width(), shard = plan.count() / uint64_t(cs.nranks);
  switch (c.coll) {
    case Collective::kAllReduce: {
      if (int rc = backend_.gather(*plan.whole(), es, c.send, plan.compact(), stream)) return rc;
      if (!c.learned) return count_pruned(cs, plan, *plan.whole(), c.send, true, stream);
      // A call on another buffer than the mask's own reports itself as a violation, whatever it holds.
      FlagEncoding flag = flag_encoding(plan.type());
      if (c.moved) flag.ok_bits = flag.bad_bits;
      return backend_.check(*plan.whole(), es, c.send, plan.flag(), flag, *plan.violations(), stream);
    }
    case Collective::kReduceScatter:
      // Shard s's kept elements go to [s * K, s * K + kept_s); the rest of its K is padding, never read.
      for (int s = 0; s < cs.nranks; ++s) {
        const void* src = static_cast<const char*>(c.send) + uint64_t(s) * shard * es;
        if (int rc = backend_.gather(*plan.shards()[size_t(s)], es, src, plan.compact_at(uint64_t(s) * width), stream))
          return rc;
        if (int rc = count_pruned(cs, plan, *plan.shards()[size_t(s)], src, s + 1 == cs.nranks, stream)) return rc;
      }
      return kResultSuccess;
    case Collective::kAllGather:
      if (int rc = backend_.gather(*plan.shards()[size_t(cs.rank)], es, c.send,
                                   plan.compact_at(uint64_t(cs.rank) * width), stream))
        return rc;
      return count_pruned(cs, plan, *plan.shards()[size_t(cs.rank)], c.send, true, stream);
  }
  return kResultInternalError;
}

// A published mask is trusted (its pruned values are dropped), but a dishonest
// one is no longer silent. The count runs on the device after the gather; the host adds what the
// last copy brought back (it lags by the calls still in flight) and warns once per communicator.
int Proxy::count_pruned(CommState& cs, EntryPlan& plan, const DeviceLayout& layout, const void* src, bool last,
                        Stream stream) {
  ViolationCounter* counter = plan.pruned_nonzeros();
  if (!counter) return kResultSuccess;
  // One copy to the host per collective (after its last shard), not one per shard.
  if (int rc = backend_.count_pruned(layout, plan.element_size(), src, *counter, last, stream)) return rc;
  if (last) add_pruned(cs, plan);
  return kResultSuccess;
}

void Proxy::add_pruned(CommState& cs, EntryPlan& plan) {
  const ViolationCounter* counter = plan.pruned_nonzeros();
  if (!counter) return;
  const uint64_t seen = counter->seen();
  uint64_t before = plan.reported.load(std::memory_order_relaxed);
  while (seen > before && !plan.reported.compare_exchange_weak(before, seen, std::memory_order_relaxed)) {}
  if (seen <= before) return;  // another reader took it, or nothing new
  const uint64_t fresh = seen - before;
  cs.mask_violations.fetch_add(fresh, std::memory_order_relaxed);
  add(stats_.mask_violations, fresh);
  if (!cs.warned_violations.exchange(true)) {
    SIEVE_WARN(
        "collective proxy: a published mask on communicator %p (%llu x %s) pruned %llu nonzero values; they "
        "were dropped, as the mask says (mask_violations counts them; SIEVE_PROXY_VERIFY=1 names the first)",
        cs.comm, (unsigned long long)plan.count(), dtype_name(plan.type()), (unsigned long long)fresh);
  }
}

void Proxy::collect_graph_counts(CommState& cs) {
  std::lock_guard lock(cs.graph_mutex);
  for (size_t i = 0; i < cs.graph_counted.size();) {
    if (std::shared_ptr<EntryPlan> plan = cs.graph_counted[i].lock()) {
      add_pruned(cs, *plan);
      ++i;
    } else {  // its graphs are gone: nothing can count into it any more
      cs.graph_counted.erase(cs.graph_counted.begin() + std::ptrdiff_t(i));
    }
  }
}

int Proxy::scatter_kept(CommState& cs, const Compaction& c, Stream stream) {
  EntryPlan& plan = *c.plan;
  const size_t es = plan.element_size();
  const uint64_t width = plan.shard_width(), shard = plan.count() / uint64_t(cs.nranks);
  int rc = kResultSuccess;
  switch (c.coll) {
    case Collective::kAllReduce:
      if (c.learned) rc = c.learned->record_compact(backend_, c.record, c.plan, stream);
      if (!rc) rc = backend_.scatter(*plan.whole(), es, plan.compact(), c.recv, stream);
      break;
    case Collective::kReduceScatter:
      rc = backend_.scatter(*plan.shards()[size_t(cs.rank)], es, plan.compact_at(uint64_t(cs.rank) * width), c.recv,
                            stream);
      break;
    case Collective::kAllGather:
      for (int s = 0; s < cs.nranks && !rc; ++s)
        rc = backend_.scatter(*plan.shards()[size_t(s)], es, plan.compact_at(uint64_t(s) * width),
                              static_cast<char*>(c.recv) + uint64_t(s) * shard * es, stream);
      break;
  }
  if (rc) return fail_comm(cs, rc, "expanding the result of a compacted collective failed");
  if (c.verify) return verify(cs, c, stream);
  return c.verify_captured ? verdict(cs, stream, "", true) : kResultSuccess;
}

// SIEVE_PROXY_VERIFY: the dense run's result against the compacted one's. Exact wherever NCCL's
// order of reduction cannot differ between the two (max, min; two ranks; every masked position);
// elsewhere within the rounding that reordering a sum of nranks terms may cause. Each rank checks
// what it received (a reduce-scatter's shard differs per rank), then every rank learns whether any
// rank found a difference, from one more collective that every rank issues after every verified
// collective (SIEVE_PROXY_VERIFY is a job-wide setting): a difference aborts the communicator on
// every rank, never only where it showed.
int Proxy::verify(CommState& cs, const Compaction& c, Stream stream) {
  EntryPlan& plan = *c.plan;
  const size_t es = plan.element_size();
  const uint64_t shard = plan.count() / uint64_t(cs.nranks);
  const uint64_t n = c.coll == Collective::kReduceScatter ? shard : plan.count();
  const uint64_t first = c.coll == Collective::kReduceScatter ? uint64_t(cs.rank) * shard : 0;  // of the mask
  const char* kind = compress::collective_name(c.coll);
  std::vector<unsigned char> got(n * es), want(n * es);
  Waiting waiting(cs, "SIEVE_PROXY_VERIFY's comparison");
  if (int rc = backend_.download(c.recv, got.data(), got.size(), stream, cs.comm, cs.live))
    return fail_comm(cs, rc, "SIEVE_PROXY_VERIFY could not read the compacted result");
  if (int rc = backend_.download(plan.verify_buffer(), want.data(), want.size(), stream, cs.comm, cs.live))
    return fail_comm(cs, rc, "SIEVE_PROXY_VERIFY could not read the dense result");
  const bool exact =
      c.coll == Collective::kAllGather || c.op == ReduceOp::kMax || c.op == ReduceOp::kMin || cs.nranks <= 2;
  // The tolerance scales with the largest finite value: one inf (an fp16 overflow) would make it
  // infinite, and then inf - inf (NaN) would fail a call whose results are the same on every rank.
  double largest = 0;
  for (uint64_t i = 0; i < n && !exact; ++i)
    if (const double w = element_value(plan.type(), &want[i * es]); std::isfinite(w))
      largest = std::max(largest, std::fabs(w));
  const double tolerance = exact ? 0 : 2.0 * (cs.nranks - 1) * unit_roundoff(plan.type()) * largest;
  char what[320] = "";
  for (uint64_t i = 0; i < n; ++i) {
    const double g = element_value(plan.type(), &got[i * es]), w = element_value(plan.type(), &want[i * es]);
    const bool kept = plan.mask().test(first + i);
    bool same = false;
    if (kept && !exact && (!std::isfinite(g) || !std::isfinite(w))) {
      // Non-finite values by identity: an inf equals an inf of the same sign, a NaN any NaN (IEEE
      // 754 defines neither the sign nor the payload of a NaN that arithmetic produces).
      same = std::isnan(g) ? std::isnan(w) : g == w;
    } else {
      same = kept && !exact ? std::fabs(g - w) <= tolerance
                            : std::memcmp(&got[i * es], &want[i * es], es) == 0 || (g == 0 && w == 0);
    }
    if (same) continue;
    std::snprintf(what, sizeof what,
                  "SIEVE_PROXY_VERIFY: call #%" PRIu64 " (%s %s, %" PRIu64
                  " elements) into buffer %p differs from "
                  "the dense result at element %" PRIu64 " (%s): compacted %.9g, dense %.9g",
                  c.seq, kind, dtype_name(plan.type()), n, c.recv, i, kept ? "kept by the mask" : "pruned by the mask",
                  g, w);
    break;
  }
  return verdict(cs, stream, what, false);
}

int Proxy::verdict(CommState& cs, Stream stream, const std::string& what, bool captured) {
  ThreadState& ts = thread_state();
  if (ts.collecting_verdicts) {  // a group's end: shared with its other communicators' verdicts
    for (VerifyVerdict& v : ts.verdicts)
      if (v.state == &cs) {
        if (v.what.empty()) v.what = what;
        v.captured = v.captured || captured;
        return kResultSuccess;
      }
    ts.verdicts.push_back(VerifyVerdict{&cs, stream, what, captured});
    return kResultSuccess;
  }
  std::vector<VerifyVerdict> one{VerifyVerdict{&cs, stream, what, captured}};
  return share_verdicts(one);
}

// Every rank issues one exchange per communicator that verified (in one group when there are
// several: one thread may drive several ranks), then reads whether any rank found a difference.
int Proxy::share_verdicts(std::vector<VerifyVerdict>& verdicts) {
  bool grouped = verdicts.size() > 1;
  if (grouped && backend_.group_start() != kResultSuccess) grouped = false;
  std::vector<int> issued(verdicts.size(), kResultSuccess);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    CommState& cs = *verdicts[i].state;
    note(cs, CallKind::kVerifyVerdict, ReduceOp::kMax, DType::kI64, CallPath::kAgreement, kVoteWords);
    if (verdicts[i].captured) {  // the fixed vote, staged once (a difference here is reported below)
      issued[i] = cs.captured_verdict
                      ? backend_.exchange_in(*cs.captured_verdict, nullptr, kVoteWords, 8, cs.comm, verdicts[i].stream)
                      : kResultInternalError;
      continue;
    }
    const Vote mine{0, fingerprint_, verdicts[i].what.empty() ? Refusal::kNone : Refusal::kCouldNotPrepare};
    write_vote(mine, cs.verdict_vote->host());
    issued[i] = backend_.exchange_in(*cs.verdict_vote, nullptr, kVoteWords, 8, cs.comm, verdicts[i].stream);
  }
  int group_rc = grouped ? backend_.group_end() : kResultSuccess;
  int result = kResultSuccess;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    CommState& cs = *verdicts[i].state;
    const std::string& what = verdicts[i].what;
    if (verdicts[i].captured) {  // nothing to read inside a graph: an eager difference fails here
      int failed = enqueued(issued[i]) ? group_rc : issued[i];
      if (failed == kResultInProgress) failed = kResultSuccess;
      if (failed) failed = fail_comm(cs, failed, "SIEVE_PROXY_VERIFY could not share its verdict in a graph");
      else if (!what.empty()) failed = fail_comm(cs, kResultInternalError, what);
      if (failed && !result) result = failed;
      continue;
    }
    Waiting waiting(cs, "SIEVE_PROXY_VERIFY's shared verdict");
    int rc = enqueued(issued[i]) ? group_rc : issued[i];
    if (rc == kResultSuccess || rc == kResultInProgress)
      rc = issued[i] == kResultInProgress || rc == kResultInProgress ? backend_.wait_enqueued(cs.comm, cs.live) : 0;
    if (!rc) rc = backend_.exchange_out(*cs.verdict_vote, nullptr, kVoteWords, 8, verdicts[i].stream);
    if (!rc) rc = backend_.wait_exchange(*cs.verdict_vote, cs.comm, cs.live);
    int failed = kResultSuccess;
    if (rc) {
      failed = fail_comm(cs, rc, what.empty() ? "SIEVE_PROXY_VERIFY could not share its comparison" : what);
    } else if (!what.empty()) {
      failed = fail_comm(cs, kResultInternalError, what);
    } else {
      const Vote mine{0, fingerprint_, Refusal::kNone};
      if (read_verdict(mine, cs.verdict_vote->host()).worst != Refusal::kNone)
        failed = fail_comm(cs, kResultInternalError,
                           "SIEVE_PROXY_VERIFY: another rank's result of a compacted collective differs from the dense "
                           "result (its log names the call and the element)");
    }
    if (failed && !result) result = failed;
  }
  verdicts.clear();
  return result;
}

// --- learned masks ---------------------------------------------------------------------------

int Proxy::learned_all_reduce(Call& call, const void* send, void* recv, uint64_t count, DType type, ReduceOp op,
                              Path* path) {
  CommState& cs = *call.state;
  const bool observe = options_.track == config::Track::kObserve;
  std::shared_ptr<LearnedSignature>& slot = cs.learned[{count, type}];
  if (!slot) {
    LearnedRules rules{options_.track_stable, options_.track_lag, options_.rules, observe, options_.verify};
    slot = std::make_shared<LearnedSignature>(count, type, rules);
  }
  const std::shared_ptr<LearnedSignature> held = slot;
  LearnedSignature& sig = *held;
  if (sig.retired()) {  // its pattern kept failing: dense, nothing recorded, on every rank alike
    *path = Path::kDense;
    note(cs, CallKind::kAllReduce, op, type, CallPath::kDense, count);
    return dense(Collective::kAllReduce, send, recv, count, type, op, cs.comm, call.stream);
  }
  LearnedDecision d;
  if (int rc = sig.begin_call(backend_, cs.comm, cs.live, send, &d)) {
    if (!observe) return fail_comm(cs, rc, "could not read a learned-mask record");
    // Observing issues no collective: losing a record only stops the observation.
    SIEVE_WARN(
        "collective proxy: SIEVE_TRACK=observe stops watching %llu-element %s all-reduces on communicator %p: "
        "reading a record failed (error %d)",
        (unsigned long long)count, dtype_name(type), cs.comm, rc);
    cs.learned.erase({count, type});
    note(cs, CallKind::kAllReduce, op, type, CallPath::kDense, count);
    return dense(Collective::kAllReduce, send, recv, count, type, op, cs.comm, call.stream);
  }
  add(stats_.learned_calls_observed, 1);
  add(stats_.learned_bytes_saved, d.would_save);
  if (d.violations) add(stats_.mask_violations, d.violations);
  if (d.fell_back || d.pattern_changed) add(stats_.learned_pattern_changes, 1);
  if (d.retired) {
    add(stats_.learned_signatures_retired, 1);
    SIEVE_WARN(
        "collective proxy: the learned mask of %llu-element %s all-reduces on communicator %p fell back %u "
        "times; that signature runs dense from now on and is no longer learned",
        (unsigned long long)count, dtype_name(type), cs.comm, LearnedSignature::kMaxFallbacks);
  } else if (d.fell_back)
    SIEVE_INFO(
        "collective proxy: a rank had nonzeros outside the learned mask of %llu-element %s all-reduces on "
        "communicator %p, or called them on another buffer; dense again, relearning",
        (unsigned long long)count, dtype_name(type), cs.comm);
  if (d.propose) {
    if (thread_state().depth > 0) {
      Deferred v{Deferred::Kind::kLearnedVote, call.state, call.stream};
      v.learned = held;
      thread_state().deferred.push_back(std::move(v));
    } else {
      if (int rc = vote_learned(cs, sig, call.stream)) return rc;
      d.compact = static_cast<bool>(sig.plan());
      d.moved = false;  // just bound to this very buffer
    }
  }
  if (!d.compact) {
    *path = Path::kDense;
    note(cs, CallKind::kAllReduce, op, type, CallPath::kDense, count);
    const int rc = dense(Collective::kAllReduce, send, recv, count, type, op, cs.comm, call.stream);
    if (!enqueued(rc)) return rc;
    Deferred r{Deferred::Kind::kRecord, call.state, call.stream};
    r.learned = held;
    r.record = d.record;
    r.output = recv;
    return after(call, rc, std::move(r));
  }
  *path = Path::kCompactLearned;
  const std::shared_ptr<EntryPlan>& plan = sig.plan();
  add(stats_.learned_bytes_saved, (count - plan->nnz() - 1) * compress::dtype_size(type));
  Compaction c{Collective::kAllReduce, plan, send, recv, op};
  c.learned = held;
  c.record = d.record;
  c.moved = d.moved;
  return compact(call, c, path);
}

// --- what follows a collective -----------------------------------------------------------------

int Proxy::run_after(Deferred& d) {
  CommState& cs = *d.state;
  switch (d.kind) {
    case Deferred::Kind::kCompaction: return scatter_kept(cs, d.compaction, d.stream);
    case Deferred::Kind::kRecord: {
      const int rc = d.learned->record_dense(backend_, d.record, d.output, d.stream);
      if (rc && options_.track == config::Track::kOn)
        return fail_comm(cs, rc, "could not record a learned-mask pattern");
      return kResultSuccess;  // observe: a missing record is read as none
    }
    case Deferred::Kind::kCommit: return finish_commit(cs, d.stream, *d.commit);
    case Deferred::Kind::kLearnedVote: return vote_learned(cs, *d.learned, d.stream);
  }
  return kResultInternalError;
}

}  // namespace sieve::plugin::proxy
