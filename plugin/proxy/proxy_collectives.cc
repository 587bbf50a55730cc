// What each interposed collective runs: dense, compacted on an agreed published mask, or on a
// learned one. Every path that compacts was decided from agreed inputs only (proxy.h); from the
// decision on, a local failure before the collective aborts the communicator instead of skipping it.
#include <limits>

#include "net/log.h"
#include "plugin/proxy/proxy.h"

namespace sieve::plugin::proxy {

namespace {

bool eligible(ElemType type, ReduceOp op) { return type != ElemType::kOther && op != ReduceOp::kOther; }

}  // namespace

const ActiveEntry* Proxy::match(CommState& cs, const void* base, uint64_t count, ElemType type) {
  auto it = cs.active.find(reinterpret_cast<uintptr_t>(base));
  if (it == cs.active.end()) return nullptr;
  const ActiveEntry& e = it->second;
  if (e.source->retired()) {
    // Republished or retracted since: dense until the next commit is agreed. A graph that
    // captured the plan keeps it for its replays.
    if (e.plan && e.plan->captured) {
      cs.graph_plans.push_back(e.plan);
      SIEVE_WARN("collective proxy: a CUDA graph compacts buffer %p with mask %llu, which was since republished or "
                 "retracted; replays of that graph still use the old mask: capture it again",
                 base, (unsigned long long)e.source->id());
    }
    cs.active.erase(it);
    return nullptr;
  }
  if (e.source->count() != count || published_dtype(type) != e.source->dtype()) {
    if (cs.warned.insert(it->first).second)
      SIEVE_WARN("collective proxy: a collective on %p (%llu x %s) does not match the mask published there "
                 "(%llu x %s); it runs dense",
                 base, (unsigned long long)count, elem_type_name(type), (unsigned long long)e.source->count(),
                 compress::dtype_name(e.source->dtype()));
    return nullptr;
  }
  return &e;
}

int Proxy::begin_compact(Call& call, EntryPlan& plan) {
  bool capture = false;
  if (int rc = capturing(call, &capture)) return rc;
  if (capture) plan.captured = true;  // the graph keeps this plan for its replays
  add(stats_.collectives_compacted, 1);
  return kResultSuccess;
}

bool Proxy::whole_count(uint64_t per_rank, int nranks, uint64_t* count) const {
  if (per_rank > std::numeric_limits<uint64_t>::max() / uint64_t(nranks)) return false;
  *count = per_rank * uint64_t(nranks);
  return *count >= options_.rules.min_count;
}

int Proxy::dense_all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op,
                            Comm comm, Stream stream) {
  add(stats_.collectives_dense, 1);
  return backend_.all_reduce(send, recv, count, type, op, comm, stream);
}

int Proxy::all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                      Stream stream, Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  std::shared_ptr<CommState> state;
  if (int rc = enter(comm, &state)) return rc;
  if (!state) {
    if (eligible(type, op)) warn_uncommitted(count);
    return dense_all_reduce(send, recv, count, type, op, comm, stream);
  }
  std::lock_guard lock(state->mutex);
  Call call{state, stream};
  if (int rc = prologue(call)) return rc;
  if (options_.enabled && eligible(type, op) && count >= options_.rules.min_count && send && recv) {
    *path = Path::kDense;
    if (const ActiveEntry* e = match(*state, send, count, type)) {
      if (e->plan && e->plan->whole()) {
        *path = Path::kCompactPublished;
        return compact_all_reduce(call, e->plan, send, recv, op);
      }
    } else if (options_.track && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
      bool capture = false;
      if (int rc = capturing(call, &capture)) return rc;
      if (!capture) return learned_all_reduce(call, send, recv, count, type, op, path);
    }
  }
  return dense_all_reduce(send, recv, count, type, op, comm, stream);
}

int Proxy::compact_all_reduce(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv,
                              ReduceOp op) {
  CommState& cs = *call.state;
  if (int rc = begin_compact(call, *plan)) return rc;
  const size_t es = plan->element_size();
  if (int rc = backend_.gather(*plan->whole(), es, send, plan->compact(), call.stream))
    return fail_comm(cs, rc, "the gather kernel of a compacted all-reduce failed");
  int rc = kResultSuccess;
  // Nothing kept: every rank knows the result is all zeros, so no collective is needed.
  if (plan->nnz() > 0) {
    rc = backend_.all_reduce(plan->compact(), plan->compact(), plan->nnz(), plan->type(), op, cs.comm, call.stream);
    if (!enqueued(rc)) return rc;
  }
  std::shared_ptr<EntryPlan> held = plan;  // a republish inside a group must not free it under the scatter
  Stream stream = call.stream;
  return after_collective(call, rc, "the scatter of a compacted all-reduce", [this, held, recv, stream] {
    return backend_.scatter(*held->whole(), held->element_size(), held->compact(), recv, stream);
  });
}

int Proxy::learned_all_reduce(Call& call, const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op,
                              Path* path) {
  CommState& cs = *call.state;
  std::unique_ptr<LearnedSignature>& slot = cs.learned[{count, type}];
  if (!slot)
    slot = std::make_unique<LearnedSignature>(count, type, options_.track_stable, options_.track_lag, options_.rules);
  LearnedSignature& sig = *slot;
  LearnedDecision d;
  // Reading an older call's record failed: this rank can no longer follow the learned sequence the
  // others follow.
  if (int rc = sig.begin_call(backend_, cs.comm, &d)) return fail_comm(cs, rc, "reading a learned-mask record failed");
  if (d.violations) add(stats_.mask_violations, d.violations);
  if (d.fell_back)
    SIEVE_INFO("collective proxy: a rank had nonzeros outside the learned mask of %llu-element %s all-reduces on "
               "communicator %p; dense again, relearning", (unsigned long long)count, elem_type_name(type), cs.comm);
  if (d.propose) {
    if (in_group()) {
      group_state().after.push_back(Deferred{call.state, call.stream, nullptr, "", false, &sig});
    } else {
      if (int rc = vote_learned(cs, sig, call.stream)) return rc;
      d.compact = sig.compact();
    }
  }
  Stream stream = call.stream;
  LearnedSignature* s = &sig;
  const size_t record = d.record;
  if (!d.compact) {
    *path = Path::kDense;
    const int rc = dense_all_reduce(send, recv, count, type, op, cs.comm, stream);
    if (!enqueued(rc)) return rc;
    return after_collective(call, rc, "a learned-mask record", [this, s, record, recv, stream] {
      return s->record_dense(backend_, record, recv, stream);
    });
  }
  *path = Path::kCompactLearned;
  add(stats_.collectives_compacted, 1);
  std::shared_ptr<EntryPlan> plan = sig.plan();
  const size_t es = plan->element_size();
  if (int rc = backend_.gather(*plan->whole(), es, send, plan->compact(), stream))
    return fail_comm(cs, rc, "the gather kernel of a learned-mask all-reduce failed");
  if (int rc = backend_.check(*plan->whole(), es, send, plan->flag(), flag_encoding(type), *plan->violations(), stream))
    return fail_comm(cs, rc, "the violation check of a learned-mask all-reduce failed");
  // The flag element travels with the kept ones and is reduced by the call's own op.
  const int rc = backend_.all_reduce(plan->compact(), plan->compact(), plan->nnz() + 1, type, op, cs.comm, stream);
  if (!enqueued(rc)) return rc;
  return after_collective(call, rc, "the scatter of a learned-mask all-reduce", [this, s, plan, record, recv, stream] {
    if (int r = s->record_compact(backend_, record, plan, stream)) return r;
    return backend_.scatter(*plan->whole(), plan->element_size(), plan->compact(), recv, stream);
  });
}

int Proxy::reduce_scatter(const void* send, void* recv, uint64_t recv_count, ElemType type, ReduceOp op, Comm comm,
                          Stream stream, Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  std::shared_ptr<CommState> state;
  if (int rc = enter(comm, &state)) return rc;
  if (state) {
    std::lock_guard lock(state->mutex);
    Call call{state, stream};
    if (int rc = prologue(call)) return rc;
    uint64_t count = 0;
    if (options_.enabled && eligible(type, op) && whole_count(recv_count, state->nranks, &count) && send && recv) {
      *path = Path::kDense;
      const ActiveEntry* e = match(*state, send, count, type);
      if (e && e->plan && !e->plan->shards().empty()) {
        *path = Path::kCompactPublished;
        return compact_reduce_scatter(call, e->plan, send, recv, op);
      }
    }
  }
  add(stats_.collectives_dense, 1);
  return backend_.reduce_scatter(send, recv, recv_count, type, op, comm, stream);
}

int Proxy::compact_reduce_scatter(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv,
                                  ReduceOp op) {
  CommState& cs = *call.state;
  if (int rc = begin_compact(call, *plan)) return rc;
  const size_t es = plan->element_size();
  const uint64_t width = plan->shard_width(), shard = plan->count() / uint64_t(cs.nranks);
  // Shard s's kept elements go to [s * K, s * K + kept_s); the rest of its K is padding, never read.
  for (int s = 0; s < cs.nranks; ++s) {
    const void* src = static_cast<const char*>(send) + uint64_t(s) * shard * es;
    if (int rc = backend_.gather(*plan->shards()[size_t(s)], es, src, plan->compact_at(uint64_t(s) * width), call.stream))
      return fail_comm(cs, rc, "the gather kernel of a compacted reduce-scatter failed");
  }
  void* mine = plan->compact_at(uint64_t(cs.rank) * width);
  const int rc = backend_.reduce_scatter(plan->compact(), mine, width, plan->type(), op, cs.comm, call.stream);
  if (!enqueued(rc)) return rc;
  std::shared_ptr<EntryPlan> held = plan;
  Stream stream = call.stream;
  const int rank = cs.rank;
  return after_collective(call, rc, "the scatter of a compacted reduce-scatter", [this, held, rank, mine, recv, stream] {
    return backend_.scatter(*held->shards()[size_t(rank)], held->element_size(), mine, recv, stream);
  });
}

int Proxy::all_gather(const void* send, void* recv, uint64_t send_count, ElemType type, Comm comm, Stream stream,
                      Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  std::shared_ptr<CommState> state;
  if (int rc = enter(comm, &state)) return rc;
  if (state) {
    std::lock_guard lock(state->mutex);
    Call call{state, stream};
    if (int rc = prologue(call)) return rc;
    uint64_t count = 0;
    if (options_.enabled && type != ElemType::kOther && whole_count(send_count, state->nranks, &count) && send && recv) {
      *path = Path::kDense;
      // The mask describes the gathered (whole) buffer: it is published on the output.
      const ActiveEntry* e = match(*state, recv, count, type);
      if (e && e->plan && !e->plan->shards().empty()) {
        *path = Path::kCompactPublished;
        return compact_all_gather(call, e->plan, send, recv);
      }
    }
  }
  add(stats_.collectives_dense, 1);
  return backend_.all_gather(send, recv, send_count, type, comm, stream);
}

int Proxy::compact_all_gather(Call& call, const std::shared_ptr<EntryPlan>& plan, const void* send, void* recv) {
  CommState& cs = *call.state;
  if (int rc = begin_compact(call, *plan)) return rc;
  const size_t es = plan->element_size();
  const uint64_t width = plan->shard_width();
  void* mine = plan->compact_at(uint64_t(cs.rank) * width);
  if (int rc = backend_.gather(*plan->shards()[size_t(cs.rank)], es, send, mine, call.stream))
    return fail_comm(cs, rc, "the gather kernel of a compacted all-gather failed");
  const int rc = backend_.all_gather(mine, plan->compact(), width, plan->type(), cs.comm, call.stream);
  if (!enqueued(rc)) return rc;
  std::shared_ptr<EntryPlan> held = plan;
  Stream stream = call.stream;
  const int nranks = cs.nranks;
  return after_collective(call, rc, "the scatters of a compacted all-gather", [this, held, nranks, width, recv, stream] {
    const uint64_t shard = held->count() / uint64_t(nranks);
    for (int s = 0; s < nranks; ++s) {
      void* dst = static_cast<char*>(recv) + uint64_t(s) * shard * held->element_size();
      if (int r = backend_.scatter(*held->shards()[size_t(s)], held->element_size(),
                                   held->compact_at(uint64_t(s) * width), dst, stream))
        return r;
    }
    return int(kResultSuccess);
  });
}

}  // namespace sieve::plugin::proxy
