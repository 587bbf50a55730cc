// SPDX-License-Identifier: Apache-2.0
// The proxy's first law as a generated property, drawing on every rank from: several
// communicators per process, put into groups in a per-rank order; one thread driving every rank
// (ncclCommInitAll); the fake's group launch in order or in a random interleaving; commits of
// several communicators in one group; published, scoped, union and collective (FSDP) masks;
// re-pruning; SIEVE_TRACK on and observe; SIEVE_PROXY_VERIFY; capture on all ranks or some (the
// others run the calls eagerly); one buffer read twice per group; non-finite values; zero-count
// tensors; a retraction on one rank only (a refused commit); threads handing a rank's work over;
// communicators destroyed and created again at the same address (a handle the proxy's abort freed
// torn down after that); an abort on one rank (ncclCommAbort, or ncclCommRevoke keeping the handle);
// split and shrunk communicators at new addresses; settings that differ per process. Not drawn
// here: faults (consistency_test.cc's), and a learned all-reduce under capture (refused by an abort:
// PROXY.md). The oracle is independent of the proxy: every result equals a dense reference computed
// here over the communicator's members; no rank's call fails but on an aborted communicator, where
// every call fails on every rank that kept its handle; no other communicator is aborted; with
// settings that differ, no commit is agreed; every rank issued the same collectives on each
// communicator up to its abort. A failing seed prints its program, shrunk to the fewest steps that
// still fail. ONLY_SEED=n runs one seed, SEEDS=a-b a range (the long run by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>

#include "plugin/sieve.h"
#include "tests/common/liveness.h"
#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

enum class Op { kPublish, kRetract, kCommit, kGroup, kSingle, kCapture, kRecreate, kAbort, kSplit };

enum class Coll { kAllReduce, kReduceScatter, kAllGather };

struct Call {
  int comm = 0, tensor = 0;
  Coll coll = Coll::kAllReduce;
  int pruning = 0;     // the pattern in force when it runs (set by the runner)
  bool twice = false;  // out-of-place: one send buffer read by a sum and an avg of the same group
  ReduceOp op = ReduceOp::kSum;
};

struct Step {
  Op op = Op::kGroup;
  int id = 0;  // its index in the generated program: per-rank choices derive from it, so shrinking keeps them
  int comm = -1, tensor = -1;
  std::vector<int> comms;   // kCommit: every communicator committed in one group
  std::vector<Call> calls;  // kGroup, kSingle
  bool nonfinite = false;   // an inf on rank 0 and a -inf on the last rank (NaN where both meet)
  int only_rank = -1;       // kRetract: on this rank only; kAbort: the rank that aborts; kSplit: the one shrunk away
  bool late = false;        // kRecreate: a handle the proxy's abort freed is torn down after the new one's creation
  int made = -1;            // kSplit: the new communicator (ncclCommSplit; ncclCommShrink with only_rank)
  bool reprune = false;     // kPublish: a new pruning pattern, in force from this communicator's next commit
  bool collective = false;  // kPublish: masks of the tensor's reduce-scatter and all-gather (FSDP's), not its buffer's
  uint32_t capture_ranks = 0;  // kCapture: the ranks that capture the group and replay it (the others run it)
};

struct Program {
  uint64_t seed = 0;
  int nranks = 2, ncomms = 1;
  // Ranks each process drives on one thread (ncclCommInitAll: every rank), in blocks: 1, 2 or all.
  int per_process = 1;
  bool one_thread() const { return per_process > 1; }
  bool nonblocking = false;
  config::Track track = config::Track::kOff;
  bool verify = false, merge = false, scoped = false;
  bool revoke = false;  // NCCL >= 2.28.7: an abort (the job's ncclCommRevoke, the proxy's own) keeps the handle
  int odd_rank = -1, odd_setting = 0;  // its process has other settings: its commits are refused
  int total_comms = 1;                 // with those kSplit makes
  bool collective_masks = false;       // reduce-scatters and all-gathers, and their masks
  uint32_t lag = 1;
  uint64_t interleave = 0;
  std::vector<uint64_t> counts;  // per tensor, the same on every communicator
  std::vector<Step> steps;
};

constexpr int kTensors = 3;

Comm handle(int comm, int rank) { return reinterpret_cast<Comm>(uintptr_t(0x10000 * (comm + 1) + 0x100 * rank)); }

// A tensor's pattern differs per communicator only where masks are scoped: an unscoped mask of a
// collective (a shape) is a promise about that shape on every communicator.
// `pruning`: the how-many-th re-pruning of the tensor on that communicator is in force (0: none).
bool kept(const Program& p, int comm, int tensor, int rank, uint64_t i, int pruning) {
  const uint64_t base = 2 + uint64_t((p.scoped ? comm : 0) + tensor + pruning) % 3;
  return i % base == 0 || (p.merge && i % 7 == uint64_t(rank)) || i == 1 || (pruning && i % 5 == uint64_t(pruning % 5));
}

compress::Mask mask_of(const Program& p, int comm, int tensor, int rank, int pruning) {
  compress::Mask m(p.counts[size_t(tensor)], false);
  for (uint64_t i = 0; i < m.count(); ++i)
    if (kept(p, comm, tensor, rank, i, pruning)) m.set_range(i, 1, true);
  return m;
}

float input(const Program& p, const Step& s, const Call& c, int rank, uint64_t i, int tick) {
  if (!kept(p, c.comm, c.tensor, rank, i, c.pruning)) return -0.0f;
  if (s.nonfinite && i == 1 && rank == 0) return std::numeric_limits<float>::infinity();
  if (s.nonfinite && i == 1 && rank == p.nranks - 1) return -std::numeric_limits<float>::infinity();
  return float(rank + 1) * 0.25f + float(i % 11) + float(tick % 7) + float(c.comm);
}

// As the fake world reduces: rank by rank, avg scaling each input first.
// `members`: the communicator's ranks (a shrunk one has fewer), in their order there.
float reference(const Program& p, const Step& s, const Call& c, ReduceOp op, uint64_t i, int tick, uint32_t members) {
  auto in = [&](int r) {
    const float v = input(p, s, c, r, i, tick);
    return op == ReduceOp::kAvg ? v / float(__builtin_popcount(members)) : v;
  };
  float acc = 0;
  bool first = true;
  for (int r = 0; r < p.nranks; ++r)
    if (members >> r & 1) acc = first ? in(r) : acc + in(r), first = false;
  return acc;
}

bool same(float got, float want) { return (std::isnan(got) && std::isnan(want)) || got == want; }

Program generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Program p;
  p.seed = seed;
  p.nranks = 2 + int(rng() % 3);
  p.ncomms = 1 + int(rng() % 3);
  const uint64_t drive = rng() % 6;
  p.per_process = drive < 2 ? p.nranks : drive < 3 ? 2 : 1;
  p.nonblocking = rng() % 4 == 0;
  const uint64_t track = rng() % 4;
  p.track = track == 0 ? config::Track::kOn : track == 1 ? config::Track::kObserve : config::Track::kOff;
  p.merge = rng() % 3 == 0;
  p.verify = rng() % 4 == 0;
  p.scoped = p.one_thread() || rng() % 2 == 0;
  p.collective_masks = rng() % 3 == 0;  // one registry for every rank: each rank's own masks
  p.lag = 1 + uint32_t(rng() % 2);
  p.interleave = rng() % 2 ? rng() | 1 : 0;
  p.revoke = rng() % 2;
  p.total_comms = p.ncomms;
  // Settings that differ per process (where a process drives every rank, nothing can differ).
  if (p.per_process < p.nranks && rng() % 6 == 0) {
    p.odd_rank = int(rng() % uint64_t(p.nranks)), p.odd_setting = int(rng() % 4);
    if (p.odd_setting == 1 && p.verify) p.odd_setting = 0;
  }
  for (int t = 0; t < kTensors; ++t)
    p.counts.push_back(t == 2 && rng() % 4 == 0 ? 0 : uint64_t(p.nranks) * (16 + 9 * uint64_t(t)));
  const int length = 8 + int(rng() % 18);
  for (int k = 0; k < length; k = int(p.steps.size())) {
    Step s;
    s.id = k;
    const uint64_t pick = rng() % 100;
    s.comm = int(rng() % uint64_t(p.total_comms));
    s.tensor = int(rng() % kTensors);
    if (pick < 15) {
      s.op = Op::kPublish;
      s.collective = p.collective_masks && rng() % 2;
      // Learned masks assume stable patterns (a change is a violation: values dropped for up to lag
      // calls, by design); an unscoped mask of a shape binds every communicator at once.
      s.reprune = p.scoped && p.track != config::Track::kOn && rng() % 3 == 0;
    } else if (pick < 20) {
      s.op = Op::kRetract;
      if (rng() % 3 == 0) s.only_rank = int(rng() % uint64_t(p.nranks));
    } else if (pick < 35) {
      s.op = Op::kCommit;
      for (int c = 0; c < p.total_comms; ++c)
        if (c == s.comm || rng() % 2) s.comms.push_back(c);
    } else if (pick < 40 && k > 4) {
      s.op = Op::kRecreate;
      s.late = !p.revoke && rng() % 2;
    } else if (pick < 44 && k > 2) {
      s.op = Op::kAbort;
      s.only_rank = int(rng() % uint64_t(p.nranks));
    } else if (pick < 48 && p.total_comms < 6) {
      // A new communicator at a new address, which then publishes, commits and compacts.
      s.op = Op::kSplit;
      s.made = p.total_comms++;
      if (p.nranks > 2 && rng() % 2) s.only_rank = int(rng() % uint64_t(p.nranks));
      p.steps.push_back(s);
      for (int t = 0; t < kTensors; ++t) {
        Step publish;
        publish.op = Op::kPublish, publish.id = int(p.steps.size()), publish.comm = s.made, publish.tensor = t;
        p.steps.push_back(publish);
      }
      Step commit;
      commit.op = Op::kCommit, commit.id = int(p.steps.size()), commit.comm = s.made, commit.comms = {s.made};
      p.steps.push_back(commit);
      continue;
    } else {
      s.op = pick < 55 && !p.one_thread() ? Op::kSingle : Op::kGroup;
      // A learned all-reduce cannot be captured (PROXY.md: capturing one aborts the communicator).
      if (pick >= 90 && p.track != config::Track::kOn && (p.odd_rank < 0 || p.odd_setting != 2)) {
        s.op = Op::kCapture;
        s.capture_ranks = p.one_thread() || rng() % 2 ? ~0u : uint32_t(rng());
      }
      const int n = s.op == Op::kSingle ? 1 : 1 + int(rng() % 4);
      std::vector<std::pair<int, int>> used;
      for (int j = 0; j < n; ++j) {
        Call c{int(rng() % uint64_t(p.total_comms)), int(rng() % kTensors)};
        if (std::find(used.begin(), used.end(), std::make_pair(c.comm, c.tensor)) != used.end()) continue;
        used.emplace_back(c.comm, c.tensor);
        c.twice = rng() % 4 == 0;
        if (p.collective_masks && rng() % 2)
          c.coll = rng() % 2 ? Coll::kReduceScatter : Coll::kAllGather, c.twice = false;
        c.op = rng() % 4 == 0 ? ReduceOp::kAvg : ReduceOp::kSum;
        s.calls.push_back(c);
      }
      s.nonfinite = rng() % 8 == 0;
    }
    p.steps.push_back(std::move(s));
  }
  return p;
}

std::string describe(const Program& p) {
  std::ostringstream o;
  o << "seed " << p.seed << ": " << p.nranks << " ranks, " << p.ncomms << " communicators"
    << (p.one_thread() ? ", one thread drives " + std::to_string(p.per_process) + " ranks" : "")
    << (p.nonblocking ? ", non-blocking" : "") << ", SIEVE_TRACK=" << config::choice_text(p.track)
    << (p.verify ? ", verify" : "") << (p.merge ? ", union" : "") << (p.scoped ? ", scoped" : "")
    << (p.collective_masks ? ", collective masks" : "") << (p.revoke ? ", aborts revoke" : "") << ", lag " << p.lag
    << ", interleave " << p.interleave << ", counts";
  static const char* const kSettings[] = {"SIEVE_PROXY_MAX_DENSITY", "SIEVE_PROXY_VERIFY", "SIEVE_TRACK",
                                          "SIEVE_PROXY"};
  if (p.odd_rank >= 0) o << ", rank " << p.odd_rank << "'s process has another " << kSettings[p.odd_setting];
  for (uint64_t c : p.counts) o << " " << c;
  for (const Step& s : p.steps) {
    o << "\n  step " << s.id << ": ";
    switch (s.op) {
      case Op::kPublish:
        o << "publish c" << s.comm << " t" << s.tensor << (s.collective ? "'s reduce-scatter and all-gather" : "")
          << (s.reprune ? ", pruned anew" : "");
        break;
      case Op::kRetract:
        o << "retract c" << s.comm << " t" << s.tensor;
        if (s.only_rank >= 0) o << " on rank " << s.only_rank << " only";
        break;
      case Op::kRecreate:
        o << "destroy c" << s.comm << ", create it again at its address"
          << (s.late ? " (a handle the proxy's abort freed: torn down after)" : "");
        break;
      case Op::kAbort:
        o << (p.revoke ? "rank " + std::to_string(s.only_rank) + " revokes c" + std::to_string(s.comm) +
                             " and keeps the handle (ncclCommRevoke)"
                       : "rank " + std::to_string(s.only_rank) + " aborts c" + std::to_string(s.comm) +
                             " (ncclCommAbort from a watchdog)");
        break;
      case Op::kSplit:
        o << (s.only_rank >= 0 ? "shrink c" : "split c") << s.comm << " into c" << s.made;
        if (s.only_rank >= 0) o << " without rank " << s.only_rank;
        break;
      case Op::kCommit:
        o << "commit in one group:";
        for (int c : s.comms) o << " c" << c;
        break;
      case Op::kGroup:
      case Op::kSingle:
      case Op::kCapture:
        if (s.op == Op::kCapture) {
          o << "captured on ranks";
          for (int r = 0; r < p.nranks; ++r)
            if (s.capture_ranks & (1u << r)) o << " " << r;
          o << " (the others run it eagerly), twice, group:";
        }
        if (s.op != Op::kCapture) o << (s.op == Op::kGroup ? "group:" : "alone:");
        for (const Call& c : s.calls)
          o << (c.coll == Coll::kAllReduce       ? " all_reduce(c"
                : c.coll == Coll::kReduceScatter ? " reduce_scatter(c"
                                                 : " all_gather(c")
            << c.comm << " t" << c.tensor << (c.op == ReduceOp::kAvg ? " avg" : " sum")
            << (c.twice ? ", read twice" : "") << ")";
        if (s.nonfinite) o << " with infinities";
        break;
    }
  }
  return o.str();
}

// One process: the ranks it drives (one, or every rank), its registry, backend and proxy.
struct Process {
  Process(const Program& p, std::vector<std::unique_ptr<FakeWorld>>& worlds, std::vector<int> ranks_of)
      : ranks(std::move(ranks_of)),
        backend(*worlds[0], ranks[0], handle(0, ranks[0])),
        proxy(backend, registry, options(p, ranks), stats) {
    for (int c = 0; c < p.ncomms; ++c)
      for (int r : ranks)
        if (c || r != ranks[0]) backend.join(handle(c, r), *worlds[size_t(c)], r);
    members.assign(size_t(p.total_comms), 0);
    for (int c = 0; c < p.ncomms; ++c) members[size_t(c)] = (1u << p.nranks) - 1;
    dead.assign(members.size(), 0), torn.assign(members.size(), 0);
    backend.nonblocking = p.nonblocking;
    backend.keeps_handle = p.revoke;
    backend.interleave_seed = p.interleave ? p.interleave + uint64_t(ranks[0]) : 0;
    const size_t buffers = size_t(p.total_comms) * kTensors * size_t(p.nranks);
    for (size_t b = 0; b < buffers; ++b) {  // by (communicator, tensor, rank), as Runner::slot()
      const uint64_t count = p.counts[(b / size_t(p.nranks)) % kTensors];
      send.emplace_back(count + 1);
      out.emplace_back(2 * (count + 1));
    }
    ids.assign(buffers, 0);
    collective_ids.assign(buffers, {});
  }
  static ProxyOptions options(const Program& p, const std::vector<int>& ranks) {
    ProxyOptions o = test_options();
    o.track = p.track;
    o.track_stable = 2;
    o.track_lag = p.lag;
    o.verify = p.verify;
    if (std::find(ranks.begin(), ranks.end(), p.odd_rank) == ranks.end()) return o;
    switch (p.odd_setting) {
      case 0: o.rules.max_density = 0.5; break;
      case 1: o.verify = true; break;
      // Observe is off to the commit (it changes no collective): on against off.
      case 2: o.track = p.track == config::Track::kOn ? config::Track::kOff : config::Track::kOn; break;
      default: o.enabled = false; break;
    }
    return o;
  }
  // Per communicator, bits by rank: its members (none: not created yet), the ranks whose calls must
  // fail (aborted, not created again yet) and those whose handle the abort tore down (no calls).
  std::vector<uint32_t> members, dead, torn;
  // Calls on aborted communicators; compacted collectives on split or shrunk ones.
  uint64_t failed_alike = 0, made_compacted = 0;
  std::vector<int> ranks;
  compress::MaskRegistry registry;
  ProcessStats stats;
  FakeBackend backend;
  Proxy proxy;
  std::vector<std::vector<float>> send, out;  // by Runner::slot()
  std::vector<uint64_t> ids;
  std::vector<std::vector<uint64_t>> collective_ids;
  // Per (communicator, tensor): the pruning its values follow, and one published for the next commit.
  std::vector<int> pruning = std::vector<int>(size_t(kTensors) * 6, 0), pending = std::vector<int>(pruning.size(), -1);
  std::string error;
};

// Runs the steps [first, last) on one process; the first failure goes into proc.error.
class Runner {
 public:
  Runner(const Program& p, Process& proc) : p_(p), proc_(proc) {}

  void run(size_t first, size_t last) {
    for (size_t k = first; k < last && proc_.error.empty(); ++k) {
      const Step& s = p_.steps[k];
      std::mt19937_64 rng(p_.seed * 1000003 + uint64_t(s.id) * 131 + uint64_t(proc_.ranks[0]));
      if (!p_.one_thread() && rng() % 4 == 0) {  // this rank hands its next step to another thread
        std::thread other([&] { step(s, rng); });
        other.join();
      } else {
        step(s, rng);
      }
    }
  }

 private:
  void fail(const Step& s, const std::string& what) {
    if (proc_.error.empty())
      proc_.error = "rank " + std::to_string(proc_.ranks[0]) + ", step " + std::to_string(s.id) + ": " + what +
                    (proc_.backend.error.empty() ? "" : " (" + proc_.backend.error + ")");
  }
  bool ok(const Step& s, int rc, Comm comm, const char* what) {
    if (rc == kResultInProgress) {
      CommLiveness live;
      rc = proc_.backend.wait_enqueued(comm, live);
    }
    if (rc) fail(s, std::string(what) + " returned " + std::to_string(rc));
    return rc == 0;
  }
  bool in(int c, int r) const { return proc_.members[size_t(c)] >> r & 1; }
  bool live(int c, int r) const { return in(c, r) && !(proc_.dead[size_t(c)] >> r & 1); }
  // A call on an aborted communicator fails, on every rank that still has its handle.
  void expect_failure(const Step& s, int c, int r) {
    if (live(c, r) || !in(c, r) || (proc_.torn[size_t(c)] >> r & 1)) return;
    float x = 1;
    int rc = proc_.proxy.all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum, handle(c, r), kStream);
    if (rc == kResultInProgress) {
      CommLiveness wait;
      rc = proc_.backend.wait_enqueued(handle(c, r), wait);
    }
    if (rc == 0) fail(s, "a call on aborted c" + std::to_string(c) + " succeeded");
    ++proc_.failed_alike;
  }
  static size_t at(int comm, int tensor) { return size_t(comm) * kTensors + size_t(tensor); }
  int staged(int comm, int tensor) const {
    const int pending = proc_.pending[at(comm, tensor)];
    return pending >= 0 ? pending : proc_.pruning[at(comm, tensor)];
  }
  size_t slot(const Call& c, int rank) const {
    return (size_t(c.comm) * kTensors + size_t(c.tensor)) * size_t(p_.nranks) + size_t(rank);
  }

  void step(const Step& s, std::mt19937_64& rng) {
    const int tick = s.id;
    switch (s.op) {
      case Op::kPublish:
      case Op::kRetract:
        if (s.reprune) proc_.pending[at(s.comm, s.tensor)] = s.id + 1;
        for (int r : proc_.ranks) {
          if (s.op == Op::kRetract && s.only_rank >= 0 && s.only_rank != r) continue;
          const size_t b = slot(Call{s.comm, s.tensor}, r);
          for (uint64_t id : proc_.collective_ids[b])
            if (!proc_.registry.retract_id(id).ok()) fail(s, "a retraction failed");
          proc_.collective_ids[b].clear();
          if (proc_.ids[b] && !proc_.registry.retract_id(proc_.ids[b]).ok()) fail(s, "a retraction failed");
          proc_.ids[b] = 0;
          if (s.op == Op::kRetract || p_.counts[size_t(s.tensor)] == 0) continue;
          const auto m =
              std::make_shared<const compress::Mask>(mask_of(p_, s.comm, s.tensor, r, staged(s.comm, s.tensor)));
          const uint64_t scope = p_.scoped ? comm_scope(handle(s.comm, r)) : 0;
          if (s.collective) {
            for (compress::Collective target :
                 {compress::Collective::kReduceScatter, compress::Collective::kAllGather}) {
              uint64_t id = 0;
              if (!proc_.registry.publish_collective(target, compress::DType::kF32, m, &id, scope).ok())
                fail(s, "a publish failed");
              proc_.collective_ids[b].push_back(id);
            }
            continue;
          }
          if (!proc_.registry.publish(proc_.send[b].data(), compress::DType::kF32, m, &proc_.ids[b], scope).ok())
            fail(s, "a publish failed");
        }
        return;
      case Op::kRecreate:
      case Op::kAbort:
      case Op::kSplit: return;  // between phases (run_program)
      case Op::kCommit: {
        std::vector<std::pair<int, int>> order;  // (communicator, rank), in this process's own order
        for (int c : s.comms)
          for (int r : proc_.ranks)
            if (live(c, r)) order.emplace_back(c, r);
            else expect_failure(s, c, r);
        if (order.empty()) return;
        std::shuffle(order.begin(), order.end(), rng);
        const bool grouped = order.size() > 1 || rng() % 2;
        if (grouped && !ok(s, proc_.proxy.group_start(), nullptr, "ncclGroupStart")) return;
        for (const auto& [c, r] : order)
          if (!ok(s, proc_.proxy.commit(handle(c, r), kStream, p_.merge ? SIEVE_COMMIT_UNION : 0, nullptr),
                  handle(c, r), "a commit"))
            return;
        if (grouped) ok(s, proc_.proxy.group_end(), handle(order[0].first, order[0].second), "a commit's group end");
        // The trainer prunes anew at the commit: from here its values follow what it published.
        for (const auto& [c, r] : order)
          for (int t = 0; t < kTensors; ++t) {
            proc_.pruning[at(c, t)] = staged(c, t);
            proc_.pending[at(c, t)] = -1;
          }
        return;
      }
      case Op::kGroup:
      case Op::kSingle:
      case Op::kCapture: {
        const uint64_t before = proc_.stats.collectives_compacted.load();
        collectives(s, rng, tick);
        if (std::all_of(s.calls.begin(), s.calls.end(), [this](const Call& c) { return c.comm >= p_.ncomms; }))
          proc_.made_compacted += proc_.stats.collectives_compacted.load() - before;
        return;
      }
    }
  }

  void collectives(const Step& program_step, std::mt19937_64& rng, int tick) {
    Step s = program_step;
    s.calls.clear();
    // Calls on a communicator not created (in a shrunk program) are not made; on an aborted one, they
    // fail; on a shrunk one, the counts need not divide: all-reduces.
    for (Call c : program_step.calls) {
      for (int r : proc_.ranks) expect_failure(s, c.comm, r);
      if (!proc_.members[size_t(c.comm)] || proc_.dead[size_t(c.comm)]) continue;
      if (__builtin_popcount(proc_.members[size_t(c.comm)]) != p_.nranks) c.coll = Coll::kAllReduce;
      c.pruning = proc_.pruning[at(c.comm, c.tensor)];
      s.calls.push_back(c);
    }
    // Each communicator's calls in program order; communicators (and ranks) in this process's order.
    std::vector<std::pair<int, int>> lanes;
    for (const Call& c : s.calls)
      for (int r : proc_.ranks)
        if (in(c.comm, r) && std::find(lanes.begin(), lanes.end(), std::make_pair(c.comm, r)) == lanes.end())
          lanes.emplace_back(c.comm, r);
    if (lanes.empty()) return;
    std::shuffle(lanes.begin(), lanes.end(), rng);
    const bool grouped = s.op != Op::kSingle;
    if (s.op != Op::kCapture) {
      fill(s, tick);
      if (issue(s, lanes, grouped)) check(s, tick);
      return;
    }
    // Captured on the ranks the step names, eager on the others: each runs the calls twice (two
    // replays, or two eager runs), on inputs that change between runs.
    if (!(s.capture_ranks & (1u << proc_.ranks[0]))) {
      for (int run = 1; run <= 2 && proc_.error.empty(); ++run) {
        fill(s, tick + 100 * run);
        if (issue(s, lanes, grouped)) check(s, tick + 100 * run);
      }
      return;
    }
    fill(s, tick);
    proc_.backend.begin_capture();
    const bool good = issue(s, lanes, grouped);
    proc_.backend.end_capture();
    for (int run = 1; run <= 2 && good && proc_.error.empty(); ++run) {
      fill(s, tick + 100 * run);
      if (proc_.backend.replay() != 0) fail(s, "a replay failed");
      else check(s, tick + 100 * run);
    }
    proc_.backend.destroy_graph();
  }

  void fill(const Step& s, int tick) {
    for (const Call& c : s.calls)
      for (int r : proc_.ranks) {
        if (!in(c.comm, r)) continue;
        std::vector<float>& b = proc_.send[slot(c, r)];
        for (uint64_t i = 0; i < p_.counts[size_t(c.tensor)]; ++i) b[i] = input(p_, s, c, r, i, tick);
      }
  }

  bool issue(const Step& s, const std::vector<std::pair<int, int>>& lanes, bool grouped) {
    if (grouped && !ok(s, proc_.proxy.group_start(), nullptr, "ncclGroupStart")) return false;
    for (const auto& [comm, r] : lanes)
      for (const Call& c : s.calls) {
        if (c.comm != comm) continue;
        const size_t b = slot(c, r);
        const uint64_t n = p_.counts[size_t(c.tensor)];
        float* send = proc_.send[b].data();
        float* out = proc_.out[b].data();
        const Comm h = handle(c.comm, r);
        const uint64_t shard = n / uint64_t(p_.nranks);
        if (c.coll == Coll::kReduceScatter) {
          if (!ok(s, proc_.proxy.reduce_scatter(send, out, shard, DType::kF32, c.op, h, kStream), h,
                  "a reduce-scatter"))
            return false;
          continue;
        }
        if (c.coll == Coll::kAllGather) {
          if (!ok(s, proc_.proxy.all_gather(send + uint64_t(r) * shard, out, shard, DType::kF32, h, kStream), h,
                  "an all-gather"))
            return false;
          continue;
        }
        if (!c.twice) {
          if (!ok(s, proc_.proxy.all_reduce(send, send, n, DType::kF32, c.op, h, kStream), h, "an all-reduce"))
            return false;
          continue;
        }
        if (!ok(s, proc_.proxy.all_reduce(send, out, n, DType::kF32, ReduceOp::kSum, h, kStream), h, "a sum") ||
            !ok(s, proc_.proxy.all_reduce(send, out + n + 1, n, DType::kF32, ReduceOp::kAvg, h, kStream), h, "an avg"))
          return false;
      }
    return !grouped || ok(s, proc_.proxy.group_end(), handle(lanes[0].first, lanes[0].second), "a group end");
  }

  void check(const Step& s, int tick) {
    for (const Call& c : s.calls)
      for (int r : proc_.ranks) {
        if (!in(c.comm, r)) continue;
        const size_t b = slot(c, r);
        const uint64_t members = proc_.members[size_t(c.comm)];
        const uint64_t n = p_.counts[size_t(c.tensor)];
        const uint64_t shard = n / uint64_t(p_.nranks);
        const uint64_t first = c.coll == Coll::kReduceScatter ? uint64_t(r) * shard : 0;
        const uint64_t last = c.coll == Coll::kReduceScatter ? first + shard : n;
        for (uint64_t i = first; i < last; ++i) {
          float want = reference(p_, s, c, c.twice ? ReduceOp::kSum : c.op, i, tick, uint32_t(members));
          float got = c.twice ? proc_.out[b][i] : proc_.send[b][i];
          if (c.coll == Coll::kReduceScatter) got = proc_.out[b][i - first];
          if (c.coll == Coll::kAllGather) {
            got = proc_.out[b][i];
            want = input(p_, s, c, int(i / shard), i, tick);
          }
          if (!same(got, want)) {
            fail(s, "c" + std::to_string(c.comm) + " t" + std::to_string(c.tensor) + " element " + std::to_string(i) +
                        ": " + std::to_string(got) + ", dense " + std::to_string(want));
            return;
          }
          if (c.twice &&
              !same(proc_.out[b][n + 1 + i], reference(p_, s, c, ReduceOp::kAvg, i, tick, uint32_t(members)))) {
            fail(s, "the second read of c" + std::to_string(c.comm) + " t" + std::to_string(c.tensor) + " element " +
                        std::to_string(i));
            return;
          }
        }
      }
  }

  const Program& p_;
  Process& proc_;
};

// What the programs reached, summed over ranks: a generator that never reaches compaction proves
// nothing.
struct Reach {
  uint64_t compacted = 0, activated = 0, refused = 0, learned = 0, failed_alike = 0, made_compacted = 0;
};

using Processes = std::vector<std::unique_ptr<Process>>;
using Worlds = std::vector<std::unique_ptr<FakeWorld>>;

// Empty when every member of communicator c issued the same collectives on it (the fake logs them
// per handle, as issued); then the logs start anew (for a communicator created there again).
std::string compare_logs(Processes& procs, int c, bool compare) {
  const std::vector<std::string>* first = nullptr;
  std::string error;
  for (auto& proc : procs)
    for (int r : proc->ranks) {
      if (!(proc->members[size_t(c)] >> r & 1)) continue;
      std::vector<std::string>& log = proc->backend.comm_log[handle(c, r)];
      if (!first) first = &log;
      else if (compare && error.empty() && log != *first)
        error = "rank " + std::to_string(r) + " issued other collectives on c" + std::to_string(c);
    }
  for (auto& proc : procs)
    for (int r : proc->ranks) proc->backend.comm_log[handle(c, r)].clear();
  return error;
}

// Between phases, on every rank at once: the job destroys a communicator and creates a new one at
// its address, aborts or revokes one on one rank, or splits or shrinks one into a new one.
void between(const Program& p, const Step& s, Processes& procs, Worlds& worlds, Worlds& retired,
             std::chrono::milliseconds patience) {
  const int c = s.op == Op::kSplit ? s.made : s.comm;
  const uint32_t members = procs[0]->members[size_t(s.op == Op::kSplit ? s.comm : c)] &
                           (s.op == Op::kSplit && s.only_rank >= 0 ? ~(1u << s.only_rank) : ~0u);
  if (!members || (s.op == Op::kSplit && procs[0]->members[size_t(c)])) return;
  // Of an aborted communicator, only a revoked one's handle remains, and NCCL only shrinks it.
  if (s.op == Op::kSplit && procs[0]->dead[size_t(s.comm)] && !(p.revoke && s.only_rank >= 0)) return;
  if (s.op == Op::kAbort) {
    if (procs[0]->dead[size_t(c)]) return;
    int who = s.only_rank;
    while (!(members >> who & 1)) who = (who + 1) % p.nranks;
    for (auto& proc : procs) {
      proc->dead[size_t(c)] = members;
      if (std::find(proc->ranks.begin(), proc->ranks.end(), who) == proc->ranks.end()) continue;
      const Comm h = handle(c, who);
      if (p.revoke) {  // ncclCommRevoke reaches NCCL directly: the proxy learns of it by its calls failing
        proc->backend.abort_comm(h);
        continue;
      }
      if (!proc->proxy.release(h, nullptr)) proc->backend.abort_comm(h);
      proc->proxy.forget(h);
      proc->torn[size_t(c)] |= 1u << who;
    }
    return;
  }
  if (worlds[size_t(c)]) retired.push_back(std::move(worlds[size_t(c)]));
  worlds[size_t(c)] = std::make_unique<FakeWorld>(__builtin_popcount(members), patience);
  for (auto& proc : procs) {
    for (int r : proc->ranks) {
      if (!(members >> r & 1)) continue;
      const Comm h = handle(c, r);
      const bool torn = s.op != Op::kRecreate || (proc->torn[size_t(c)] >> r & 1);
      // Only a freed handle's address can be NCCL's again before the job tears the handle down.
      const bool late = s.late && !torn && !p.revoke && proc->proxy.aborted(h);
      if (!torn && !late && proc->proxy.teardown(h, nullptr)) proc->backend.destroy_comm(h);
      proc->backend.join(h, *worlds[size_t(c)], __builtin_popcount(members & ((1u << r) - 1)));
      proc->proxy.created(h);
      if (late && proc->proxy.teardown(h, nullptr)) proc->backend.destroy_comm(h);
    }
    proc->members[size_t(c)] = members, proc->dead[size_t(c)] = 0, proc->torn[size_t(c)] = 0;
  }
}

// Runs the program; empty when the property holds, else what broke it.
std::string run_program(const Program& p, Reach* reach = nullptr) {
  std::vector<std::unique_ptr<FakeWorld>> worlds;
  // A rank that never comes fails its collective: a hang is a failure. Generous: a loaded 2-core
  // host once kept a rank's thread off the CPU for 2 s.
  const auto patience =
      std::chrono::duration_cast<std::chrono::milliseconds>(liveness::bound(std::chrono::seconds(10)));
  for (int c = 0; c < p.total_comms; ++c)
    worlds.push_back(c < p.ncomms ? std::make_unique<FakeWorld>(p.nranks, patience) : nullptr);
  Processes procs;
  for (int first_rank = 0; first_rank < p.nranks; first_rank += p.per_process) {
    std::vector<int> block;
    for (int r = first_rank; r < std::min(p.nranks, first_rank + p.per_process); ++r) { block.push_back(r); }
    procs.push_back(std::make_unique<Process>(p, worlds, block));
  }
  std::vector<std::unique_ptr<FakeWorld>> retired;  // destroyed communicators' worlds, for their counts
  size_t first = 0;
  std::string error;
  auto check_worlds = [&](const std::vector<std::unique_ptr<FakeWorld>>& ws) {
    for (const auto& w : ws)
      if (w && w->mismatches() && error.empty()) error = "ranks issued different collectives";
  };
  // Where only some ranks capture, the logs differ (a graph's collectives are logged once, at its
  // capture): the worlds' own comparison of every collective that ran is the check, with the failure
  // of any that had no peer.
  const bool some_capture = std::any_of(p.steps.begin(), p.steps.end(), [&p](const Step& s) {
    const uint32_t all = (1u << p.nranks) - 1;
    return s.op == Op::kCapture && (s.capture_ranks & all) != 0 && (s.capture_ranks & all) != all;
  });
  for (size_t k = 0; k <= p.steps.size() && error.empty(); ++k) {
    if (k < p.steps.size() && p.steps[k].op != Op::kRecreate && p.steps[k].op != Op::kAbort &&
        p.steps[k].op != Op::kSplit)
      continue;
    // A phase: every process runs its steps on its own thread.
    std::vector<std::thread> threads;
    for (auto& proc : procs) threads.emplace_back([&p, &proc, first, k] { Runner(p, *proc).run(first, k); });
    for (std::thread& t : threads) t.join();
    for (auto& proc : procs)
      if (!proc->error.empty() && error.empty()) error = proc->error;
    check_worlds(worlds);
    if (k == p.steps.size() || !error.empty()) break;
    // Every rank issued the same collectives on a communicator up to its abort or destruction.
    const Step& s = p.steps[k];
    if (s.op != Op::kSplit && s.comm < p.total_comms) {
      error = compare_logs(procs, s.comm, !some_capture && !procs[0]->dead[size_t(s.comm)]);
      if (!error.empty()) break;
    }
    between(p, s, procs, worlds, retired, patience);
    first = k + 1;
  }
  check_worlds(retired);
  for (auto& proc : procs)
    if (reach) {
      reach->compacted += proc->stats.collectives_compacted.load();
      reach->activated += proc->stats.tables_activated.load();
      reach->refused += proc->stats.tables_refused.load();
      reach->learned += p.track == config::Track::kOn ? proc->stats.learned_bytes_saved.load() : 0;
      reach->failed_alike += proc->failed_alike, reach->made_compacted += proc->made_compacted;
    }
  // No communicator was aborted but by the job: settings that differ refuse commits, never abort.
  for (size_t c = 0; c < worlds.size(); ++c)
    if (worlds[c] && worlds[c]->aborted() && !procs[0]->dead[c] && error.empty()) error = "a communicator was aborted";
  uint64_t agreed = 0;
  for (auto& proc : procs) agreed += proc->stats.tables_activated.load();
  const bool shrunk =
      std::any_of(p.steps.begin(), p.steps.end(), [](const Step& s) { return s.op == Op::kSplit && s.only_rank >= 0; });
  if (p.odd_rank >= 0 && !shrunk && agreed && error.empty()) error = "a commit was agreed although settings differ";
  for (int c = 0; c < p.total_comms && error.empty(); ++c)
    error = compare_logs(procs, c, !some_capture && !procs[0]->dead[size_t(c)]);
  return error;
}

// The fewest steps (greedily, one at a time) that still fail.
Program shrink(Program p) {
  for (size_t k = p.steps.size(); k-- > 0;) {
    Program smaller = p;
    smaller.steps.erase(smaller.steps.begin() + long(k));
    if (!run_program(smaller).empty()) p = std::move(smaller);
  }
  return p;
}

class Generative : public ::testing::TestWithParam<int> {};

constexpr uint64_t kSeedsPerCase = 50;

TEST_P(Generative, EveryFeatureOnEveryRankKeepsRanksTogether) {
  LogCapture quiet;  // refusals and learning log; the property says what matters
  uint64_t first = uint64_t(GetParam()) * kSeedsPerCase, last = first + kSeedsPerCase;
  if (const char* only = std::getenv("ONLY_SEED")) {
    if (GetParam() != 0) return;
    first = std::stoull(only), last = first + 1;
  }
  if (const char* seeds = std::getenv("SEEDS")) {  // FIRST-LAST: a long run by hand
    if (GetParam() != 0) return;
    const std::string range = seeds;
    first = std::stoull(range.substr(0, range.find('-'))), last = std::stoull(range.substr(range.find('-') + 1));
  }
  Reach reach;
  for (uint64_t seed = first; seed < last; ++seed) {
    const Program p = generate(seed);
    const std::string error = run_program(p, &reach);
    if (error.empty()) continue;
    if (run_program(p).empty()) {  // say so rather than print a "minimal" program that passes
      ADD_FAILURE() << "seed " << seed << ": " << error << "\n(it passed when run again)\n" << describe(p);
      return;
    }
    const Program minimal = shrink(p);
    ADD_FAILURE() << error << "\nminimal program (" << run_program(minimal) << "):\n" << describe(minimal);
    return;
  }
  if (std::getenv("GENERATIVE_REACH"))
    std::fprintf(stderr,
                 "compacted %llu, tables activated %llu, refused %llu, learned bytes saved %llu, calls on aborted "
                 "communicators %llu, compacted on split or shrunk ones %llu\n",
                 (unsigned long long)reach.compacted, (unsigned long long)reach.activated,
                 (unsigned long long)reach.refused, (unsigned long long)reach.learned,
                 (unsigned long long)reach.failed_alike, (unsigned long long)reach.made_compacted);
  if (last - first == kSeedsPerCase) {
    EXPECT_GT(reach.compacted, 0u) << "no program compacted anything";
    EXPECT_GT(reach.activated, 0u) << "no commit was agreed";
    EXPECT_GT(reach.failed_alike, 0u) << "no program called an aborted communicator";
    EXPECT_GT(reach.made_compacted, 0u) << "no split or shrunk communicator compacted";
  }
}

// 20 cases of 50 seeds: 1,000 seeds (ctest runs them in one executable).
INSTANTIATE_TEST_SUITE_P(Seeds, Generative, ::testing::Range(0, 20));

}  // namespace
}  // namespace sieve::plugin::proxy
