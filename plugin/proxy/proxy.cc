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

namespace {

bool eligible(ElemType type, ReduceOp op) { return type != ElemType::kOther && op != ReduceOp::kOther; }

// Same hash for "no mask covers this buffer" on every rank; a real mask's hash is never asked to be 0.
uint64_t hash_of(const std::shared_ptr<const compress::Mask>& mask) { return mask ? mask->hash() | 1ull : 0; }

}  // namespace

Proxy::Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats)
    : backend_(backend), registry_(registry), options_(options), stats_(stats) {
  if (options_.track_lag == 0) options_.track_lag = 1;
}

std::shared_ptr<Proxy::BufferState> Proxy::state_for(const BufferKey& key) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<BufferState>& s = buffers_[key];
  if (!s) s = std::make_shared<BufferState>();
  return s;
}

Proxy::GroupState& Proxy::group_state() {
  std::lock_guard lock(mutex_);
  return groups_[std::this_thread::get_id()];  // unordered_map references stay valid on insert
}

bool Proxy::in_group() { return group_state().depth > 0; }

int Proxy::after_collective(std::function<int()> work) {
  GroupState& g = group_state();
  if (g.depth > 0) {
    g.after.push_back(std::move(work));
    return kResultSuccess;
  }
  return work();
}

int Proxy::group_start() {
  int rc = backend_.group_start();
  if (rc == kResultSuccess) ++group_state().depth;
  return rc;
}

int Proxy::group_end() {
  GroupState& g = group_state();
  int rc = backend_.group_end();
  if (g.depth > 0 && --g.depth == 0) {
    // The group's collectives are enqueued now: their scatters and records may follow on the streams.
    std::vector<std::function<int()>> after;
    after.swap(g.after);
    for (auto& work : after) {
      int work_rc = work();
      if (rc == kResultSuccess) rc = work_rc;
    }
  }
  return rc;
}

Proxy::Agreement Proxy::agreement(const BufferKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = buffers_.find(key);
  return it == buffers_.end() ? Agreement::kUnchecked : it->second->published.agreement;
}

size_t Proxy::plans() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, s] : buffers_) n += (s->published.plan ? 1 : 0) + (s->learned && s->learned->compact() ? 1 : 0);
  return n;
}

int Proxy::refresh_published(const BufferKey& key, PublishedState& s) {
  const uint64_t generation = registry_.generation();
  if (generation == s.generation) return kResultSuccess;
  s.generation = generation;
  const size_t esize = element_size(key.type);
  std::shared_ptr<const compress::Mask> mask = registry_.lookup(key.send, key.count, esize).mask;
  if (!mask && key.recv != key.send) mask = registry_.lookup(key.recv, key.count, esize).mask;
  const bool same = (mask == s.mask) || (mask && s.mask && *mask == *s.mask);
  if (same && s.agreement != Agreement::kUnchecked) return kResultSuccess;  // an unrelated publish
  // A new mask: it must be agreed again before use, on every rank at this same call.
  s.mask = std::move(mask);
  retire_plan(s);
  s.agreement = Agreement::kUnchecked;
  return kResultSuccess;
}

void Proxy::retire_plan(PublishedState& s) {
  if (s.plan && s.captured) {
    std::lock_guard lock(mutex_);
    captured_plans_.push_back(s.plan);
  }
  s.plan.reset();
  s.captured = false;
}

int Proxy::agree_published(const BufferKey& key, PublishedState& s, Stream stream) {
  bool all_equal = false;
  if (int rc = backend_.agree(key.comm, stream, hash_of(s.mask), &all_equal)) return rc;
  if (!all_equal) {
    s.agreement = Agreement::kMismatch;
    SIEVE_WARN("collective proxy: ranks disagree on the mask of buffer %p (send %p, %llu x %s, comm %p; here %s); "
               "this buffer runs dense until its mask is republished",
               key.recv, key.send, (unsigned long long)key.count, elem_type_name(key.type), key.comm,
               s.mask ? "published" : "no mask");
    return kResultSuccess;
  }
  s.agreement = Agreement::kAgreed;
  if (!s.mask || s.mask->kept() == s.mask->count() || s.mask->density() > options_.max_density) return kResultSuccess;
  std::unique_ptr<DevicePlan> plan;
  if (int rc = backend_.create_plan(*s.mask, key.type, /*with_check=*/false, &plan)) return rc;
  s.plan = std::move(plan);
  SIEVE_INFO("collective proxy: buffer %p (%llu x %s) compacts to %llu elements (density %.3f)", key.recv,
             (unsigned long long)key.count, elem_type_name(key.type), (unsigned long long)s.mask->kept(),
             s.mask->density());
  return kResultSuccess;
}

int Proxy::dense(const BufferKey& key, ReduceOp op, Stream stream) {
  add(stats_.collectives_dense, 1);
  return backend_.all_reduce(key.send, key.recv, key.count, key.type, op, key.comm, stream);
}

int Proxy::run_compact_published(const BufferKey& key, const std::shared_ptr<DevicePlan>& plan, ReduceOp op,
                                 Stream stream) {
  add(stats_.collectives_compacted, 1);
  if (int rc = backend_.gather(*plan, key.send, stream)) return rc;
  int rc = kResultSuccess;
  // Nothing kept: every rank knows the result is all zeros, so no collective is needed.
  if (plan->nnz() > 0) {
    rc = backend_.all_reduce(plan->compact(), plan->compact(), plan->nnz(), key.type, op, key.comm, stream);
    if (!enqueued(rc)) return rc;
  }
  // The work holds the plan: a republish inside a group must not free it under the deferred scatter.
  std::shared_ptr<DevicePlan> held = plan;
  const int post = after_collective([this, held, key, stream] { return backend_.scatter(*held, key.recv, stream); });
  return post ? post : rc;
}

int Proxy::run_learned(const BufferKey& key, BufferState& state, ReduceOp op, Stream stream, Path* path) {
  if (!state.learned)
    state.learned = std::make_unique<LearnedBuffer>(key.count, key.type, options_.track_stable, options_.track_lag,
                                                    options_.max_density);
  LearnedBuffer& learned = *state.learned;
  LearnedDecision d;
  if (int rc = learned.begin_call(backend_, &d)) return rc;
  if (d.violations) add(stats_.mask_violations, d.violations);
  if (d.became_compact)
    SIEVE_INFO("collective proxy: learned a stable mask for buffer %p (%llu x %s, density %.3f); compacting",
               key.recv, (unsigned long long)key.count, elem_type_name(key.type),
               learned.tracker().stable_mask()->density());
  if (d.fell_back)
    SIEVE_INFO("collective proxy: a rank had nonzeros outside the learned mask of buffer %p; dense again, relearning",
               key.recv);
  if (!d.compact) {
    *path = Path::kDense;
    const int rc = dense(key, op, stream);
    if (!enqueued(rc)) return rc;
    LearnedBuffer* l = &learned;
    const size_t record = d.record;
    const int post =
        after_collective([this, l, record, key, stream] { return l->record_dense(backend_, record, key.recv, stream); });
    return post ? post : rc;
  }
  *path = Path::kCompactLearned;
  add(stats_.collectives_compacted, 1);
  std::shared_ptr<DevicePlan> plan = learned.plan();
  const FlagEncoding encoding = flag_encoding(key.type, op);
  if (int rc = backend_.gather(*plan, key.send, stream)) return rc;
  if (int rc = backend_.check(*plan, key.send, encoding, stream)) return rc;
  // The flag element travels with the kept ones and is reduced by the caller's own op.
  const int rc = backend_.all_reduce(plan->compact(), plan->compact(), plan->nnz() + 1, key.type, op, key.comm, stream);
  if (!enqueued(rc)) return rc;
  LearnedBuffer* l = &learned;
  const size_t record = d.record;
  const int post = after_collective([this, l, plan, record, encoding, key, stream] {
    if (int r = l->record_compact(backend_, record, plan, encoding, stream)) return r;
    return backend_.scatter(*plan, key.recv, stream);
  });
  return post ? post : rc;
}

int Proxy::all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                      Stream stream, Path* path) {
  Path ignored;
  if (!path) path = &ignored;
  *path = Path::kPassThrough;
  const BufferKey key{comm, send, recv, count, type};
  // Nothing to do: ineligible, small, or no mask ever published and no learning. Costs a few loads.
  const bool nothing_published = registry_.generation() == 0;
  if (count < options_.min_count || count == 0 || !eligible(type, op) || !send || !recv ||
      (!options_.track && nothing_published)) {
    add(stats_.collectives_dense, 1);
    return backend_.all_reduce(send, recv, count, type, op, comm, stream);
  }
  // Captured work replays without the proxy: only plans that exist, agreed, may be used, and
  // nothing may be allocated or waited for.
  const bool capturing = backend_.capturing(stream);
  std::shared_ptr<BufferState> state = state_for(key);
  PublishedState& pub = state->published;
  *path = Path::kDense;
  if (!capturing)
    if (int rc = refresh_published(key, pub)) return rc;
  if (pub.agreement == Agreement::kUnchecked && !nothing_published) {
    // Agreement needs a wait; never inside a group (the exchange would join it) or a capture.
    if (capturing || in_group()) return dense(key, op, stream);
    if (int rc = agree_published(key, pub, stream)) return rc;
  }
  if (pub.agreement == Agreement::kAgreed && pub.plan) {
    *path = Path::kCompactPublished;
    if (capturing) pub.captured = true;
    return run_compact_published(key, pub.plan, op, stream);
  }
  const bool published_covers = pub.mask != nullptr;
  if (options_.track && !published_covers && !capturing) return run_learned(key, *state, op, stream, path);
  return dense(key, op, stream);
}

}  // namespace sieve::plugin::proxy
