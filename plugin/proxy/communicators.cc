// SPDX-License-Identifier: Apache-2.0
// The proxy's communicators, aborts, hang forensics and the calling thread's state. NCCL groups are
// in groups.cc, commits and learned-mask votes in commit.cc, what each collective runs in
// collectives.cc.
#include "plugin/proxy/proxy.h"

#include <cinttypes>
#include <utility>

#include "net/log.h"

namespace sieve::plugin::proxy {

const char* path_name(Path path) {
  switch (path) {
    case Path::kPassThrough: return "pass-through";
    case Path::kDense: return "dense";
    case Path::kCompactPublished: return "compact (published mask)";
    case Path::kCompactLearned: return "compact (learned mask)";
    case Path::kCommit: return "commit";
  }
  return "?";
}

uint64_t ProxyOptions::fingerprint() const {
  uint64_t h = 0x50524f5859ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  };
  mix(3);  // the agreement's protocol (3: SIEVE_PROXY_VERIFY's shared verdict): a library that votes
           // differently is a different setting
  mix(track == config::Track::kOn);
  mix(track_stable);
  mix(track_lag);
  mix(uint64_t(rules.max_density * 1e6 + 0.5));
  mix(rules.min_count);
  mix(verify);
  return h;
}

thread_local Proxy::ThreadCache Proxy::t_cache;

namespace {

std::atomic<uint64_t> g_next_proxy_id{1};
std::atomic<uint64_t> g_next_thread_serial{1};

// This thread's number (never reused, unlike std::thread::id) and what to undo when it exits.
struct ThreadExit {
  const uint64_t serial = g_next_thread_serial.fetch_add(1);
  std::vector<std::function<void()>> forget;  // one per proxy this thread called
  ~ThreadExit() {
    for (auto& f : forget) f();
  }
};
thread_local ThreadExit t_exit;

}  // namespace

Proxy::Proxy(DeviceBackend& backend, const compress::MaskRegistry& registry, ProxyOptions options, ProcessStats& stats)
    : id_(g_next_proxy_id.fetch_add(1)),
      backend_(backend),
      registry_(registry),
      options_([&] {
        if (options.track_lag == 0) options.track_lag = 1;
        if (options.track_stable == 0) options.track_stable = 1;
        return options;
      }()),
      fingerprint_(options_.fingerprint()),
      stats_(stats),
      threads_(std::make_shared<ThreadStates>()) {}

// --- communicators ---------------------------------------------------------------------------

int Proxy::enter(Comm comm, std::shared_ptr<CommState>* out) {
  if (t_cache.proxy == id_ && t_cache.comm == comm)
    if (std::shared_ptr<CommState> cached = t_cache.comm_state.lock())
      if (!cached->forgotten.load(std::memory_order_acquire)) {
        *out = std::move(cached);
        return kResultSuccess;
      }
  *out = find(comm);
  if (!*out) {
    auto cs = std::make_shared<CommState>(comm);
    if (int rc = backend_.comm_shape(comm, &cs->nranks, &cs->rank)) return rc;
    std::lock_guard lock(mutex_);
    *out = comms_.emplace(comm, cs).first->second;
  }
  if (t_cache.proxy == id_) {
    t_cache.comm = comm;
    t_cache.comm_state = *out;
  }
  return kResultSuccess;
}

int Proxy::begin_call(Comm comm, Stream stream, Call* call) {
  if (int rc = enter(comm, &call->state)) return rc;
  call->stream = stream;
  call->lock = std::unique_lock(call->state->mutex);
  CommState& cs = *call->state;
  if (!cs.live.alive() || cs.failed.load(std::memory_order_acquire)) {
    if (!cs.warned_failed) {
      cs.warned_failed = true;
      SIEVE_WARN("collective proxy: communicator %p was aborted; its calls fail", cs.comm);
    }
    return kResultInvalidUsage;
  }
  return kResultSuccess;
}

bool Proxy::release(Comm comm, const char* why) {
  if (why) report(why);  // first: the report names the communicator and what it waits for
  const std::shared_ptr<CommState> cs = find(comm);
  if (!cs) return false;
  // Whoever claims the abort first owns it: the proxy's own fail_comm, or this caller.
  int owner = 0;
  const bool proxy_aborted =
      !cs->abort_owner.compare_exchange_strong(owner, 2, std::memory_order_seq_cst) && owner == 1;
  cs->live.aborting.store(true, std::memory_order_seq_cst);
  // No wait or poll touches the communicator from now on; let the one touching it now finish.
  while (cs->live.polling.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  if (!proxy_aborted) return false;
  // The proxy's abort may still be inside NCCL on another thread: the job's teardown comes after it.
  while (!cs->abort_done.load(std::memory_order_acquire)) std::this_thread::yield();
  return !cs->handle_kept.load(std::memory_order_acquire);
}

int Proxy::async_error(Comm comm, int* error) {
  const std::shared_ptr<CommState> cs = find(comm);
  if (!cs) return backend_.comm_async_error(comm, error);
  // Counted in `polling` before the flag is read: an abort raises the flag first and then waits for
  // `polling` to drop, so either it sees this poll and waits, or this poll sees the flag and leaves.
  cs->live.polling.fetch_add(1, std::memory_order_seq_cst);
  int rc = kResultSuccess;
  if (cs->failed.load(std::memory_order_acquire) || !cs->live.alive())
    *error = kResultSystemError;  // aborted (the proxy logged why), or being aborted: never touched
  else rc = backend_.comm_async_error(comm, error);
  cs->live.polling.fetch_sub(1, std::memory_order_seq_cst);
  return rc;
}

void Proxy::forget(Comm comm) {
  std::shared_ptr<CommState> gone = find(comm);
  // Teardown: what graphs' replays counted reaches the statistics before the state goes.
  if (gone) collect_graph_counts(*gone);
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return;
  // A CUDA graph may outlive its communicator and be replayed (its collective then fails in NCCL):
  // its gathers and scatters must still find their plans' memory, never freed memory. Its state is
  // kept, untouched (a call may still hold its lock), for as long as the process lives.
  it->second->forgotten.store(true, std::memory_order_release);
  if (it->second->captured.load(std::memory_order_acquire)) orphaned_.push_back(std::move(it->second));
  comms_.erase(it);
}

void Proxy::created(Comm comm) {
  if (const std::shared_ptr<CommState> old = find(comm))
    if (old->abort_owner.load(std::memory_order_seq_cst) == 1 && !old->handle_kept.load(std::memory_order_acquire)) {
      SIEVE_INFO(
          "collective proxy: a new communicator has the address of %p, which the proxy aborted; the job's next "
          "teardown of that address is taken as the dead handle's and does not reach NCCL",
          comm);
      std::lock_guard lock(mutex_);
      dead_handles_.insert(comm);
    }
  forget(comm);
}

bool Proxy::teardown(Comm comm, const char* why) {
  {
    std::lock_guard lock(mutex_);
    if (dead_handles_.erase(comm)) return false;
  }
  const bool dead = release(comm, why);
  forget(comm);
  return !dead;
}

bool Proxy::dead_handle(Comm comm) const {
  {
    std::lock_guard lock(mutex_);
    if (dead_handles_.count(comm)) return true;
  }
  return aborted(comm);
}

bool Proxy::aborted(Comm comm) const {
  const std::shared_ptr<CommState> cs = find(comm);
  return cs && cs->failed.load(std::memory_order_acquire);
}

std::shared_ptr<Proxy::CommState> Proxy::find(Comm comm) const {
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second;
}

template <typename T, typename Read> T Proxy::read_locked(Comm comm, T absent, Read read) const {
  const std::shared_ptr<CommState> cs = find(comm);
  if (!cs) return absent;
  std::lock_guard lock(cs->mutex);
  return read(*cs);
}

size_t Proxy::active_entries(Comm comm) const {
  return read_locked<size_t>(comm, 0, [](const CommState& cs) { return cs.active.size(); });
}

size_t Proxy::graph_plans(Comm comm) const {
  return read_locked<size_t>(comm, 0, [](const CommState& cs) { return cs.graph_plans.size(); });
}

uint64_t Proxy::commits(Comm comm) const {
  return read_locked<uint64_t>(comm, 0, [](const CommState& cs) { return cs.commits; });
}

uint64_t Proxy::mask_violations(Comm comm) const {
  const std::shared_ptr<CommState> cs = find(comm);  // an atomic: no lock a call may hold
  return cs ? cs->mask_violations.load(std::memory_order_relaxed) : 0;
}

int Proxy::fail_comm(CommState& cs, int rc, const std::string& what) {
  cs.failed.store(true, std::memory_order_release);
  int owner = 0;
  const bool mine = cs.abort_owner.compare_exchange_strong(owner, 1, std::memory_order_seq_cst);
  cs.live.aborting.store(true, std::memory_order_seq_cst);
  if (!mine) {
    // Someone else (the job's watchdog) is aborting it: that is why the wait ended.
    SIEVE_INFO("collective proxy: communicator %p was aborted while the proxy %s", cs.comm, what.c_str());
    return rc ? rc : kResultSystemError;
  }
  SIEVE_WARN(
      "collective proxy: %s (error %d) on communicator %p; aborting the communicator, so that no rank "
      "waits for a collective this rank cannot run as agreed",
      what.c_str(), rc, cs.comm);
  report("the proxy aborted a communicator");
  // A watchdog's ncclCommGetAsyncError may be inside NCCL on this handle: it leaves first.
  while (cs.live.polling.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  cs.handle_kept.store(backend_.abort_keeps_handle(), std::memory_order_release);
  backend_.abort_comm(cs.comm);
  cs.abort_done.store(true, std::memory_order_release);
  return rc ? rc : kResultSystemError;
}

void Proxy::report(const char* why) const {
  const std::string text = describe_state(why);
  if (report_) report_(text);
  else SIEVE_WARN("%s", text.c_str());
}

void Proxy::note(CommState& cs, CallKind kind, ReduceOp op, std::optional<DType> type, CallPath path, uint64_t count) {
  CallRecord r;
  r.kind = kind;
  r.op = op;
  r.type = type;
  r.path = path;
  r.count = count;
  r.table = cs.table_hash;
  cs.history.add(r);
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

std::string Proxy::describe_state(const char* why) const {
  std::vector<std::shared_ptr<CommState>> comms;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [comm, cs] : comms_) comms.push_back(cs);
  }
  std::string out =
      std::string("collective proxy state (") + why + "): " + std::to_string(comms.size()) + " communicator(s)";
  for (const auto& cs : comms) {
    char head[256];
    const char* waiting = cs->waiting_for.load(std::memory_order_relaxed);
    const uint64_t pruned = cs->mask_violations.load(std::memory_order_relaxed);
    std::snprintf(head, sizeof head, "\n  communicator %p rank %d of %d: %" PRIu64 " calls%s%s%s%s", cs->comm, cs->rank,
                  cs->nranks, cs->history.last_seq(), cs->failed.load() ? ", aborted by the proxy" : "",
                  waiting ? ", waiting for " : "", waiting ? waiting : "",
                  pruned ? (", " + std::to_string(pruned) + " nonzero values its published masks pruned").c_str() : "");
    out += head;
    for (const CallRecord& r : cs->history.recent()) out += "\n    " + describe(r);
  }
  return out;
}

// --- the calling thread ----------------------------------------------------------------------

struct Proxy::ThreadStates {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::unique_ptr<ThreadState>> by_thread;  // by ThreadExit::serial
};

Proxy::ThreadState& Proxy::thread_state() {
  if (t_cache.proxy == id_) return *static_cast<ThreadState*>(t_cache.thread_state);
  ThreadExit& self = t_exit;
  ThreadState* ts = nullptr;
  {
    std::lock_guard lock(threads_->mutex);
    auto& slot = threads_->by_thread[self.serial];
    if (!slot) {
      slot = std::make_unique<ThreadState>();
      // A proxy gone before the thread needs nothing undone; the state is freed outside the lock
      // (its communicators' last references may go with it).
      self.forget.push_back([weak = std::weak_ptr<ThreadStates>(threads_), serial = self.serial] {
        auto states = weak.lock();
        if (!states) return;
        std::unique_ptr<ThreadState> gone;
        std::lock_guard held(states->mutex);
        auto it = states->by_thread.find(serial);
        if (it == states->by_thread.end()) return;
        gone = std::move(it->second);
        states->by_thread.erase(it);
      });
    }
    ts = slot.get();
  }
  t_cache = ThreadCache{id_, ts, nullptr, {}};
  return *ts;
}

}  // namespace sieve::plugin::proxy
