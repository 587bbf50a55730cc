// The first law of the proxy as a property: for random programs — publishes, commits, retracts,
// frees with address reuse that differs per rank, groups (nested, simulated), captures and replays,
// non-blocking communicators, learned masks, injected failures on one rank — every rank issues the
// same collectives with the same counts (the fake world fails any mismatch, and every rank's log of
// real collectives is compared), or every rank gets an error (an injected failure after activation
// aborts the communicator); and every result equals the dense reference exactly.
#include <gtest/gtest.h>

#include <random>

#include "plugin/sieve.h"
#include "tests/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

enum class Kind { kAlloc, kFree, kPublish, kRetract, kCommit, kCollective, kGroup, kSimulatedGroup, kCapture };
enum class Coll { kAllReduce, kReduceScatter, kAllGather };

struct Collective {
  Coll coll;
  int tensor;
  ReduceOp op;
};

struct Step {
  Kind kind;
  int tensor = -1;
  uint32_t flags = 0;
  std::vector<Collective> body;   // kCollective (one), kGroup, kSimulatedGroup, kCapture
  int commit_inside = -1;         // kGroup: commit after this many collectives of the body
  bool nested = false;            // kGroup: the body runs inside two levels of groups
};

struct Program {
  int nranks = 2;
  bool nonblocking = false;
  bool track = false;
  bool merge = false;          // SIEVE_COMMIT_UNION: ranks' masks differ
  int fault_rank = -1;
  FakeFaults fault;
  std::vector<uint64_t> counts;  // per tensor
  std::vector<compress::Mask> masks;  // per tensor: where values may be nonzero (all ranks, before union extras)
  std::vector<Step> steps;
};

compress::Mask random_mask(std::mt19937_64& rng, uint64_t count) {
  compress::Mask m(count, false);
  const int kind = int(rng() % 3);
  if (kind == 0) m = compress::Mask(count, true);  // dense tensor (biases)
  const double density = 0.1 + double(rng() % 50) / 100.0;
  for (uint64_t i = 0; i < count && kind != 0; ++i)
    if (kind == 1 ? double(rng() % 1000) < density * 1000 : (i / 16) % 3 == 0) m.set_range(i, 1, true);
  return m;
}

Program generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Program p;
  p.nranks = 2 + int(rng() % 7);
  p.nonblocking = rng() % 4 == 0;
  p.track = rng() % 4 == 0;
  p.merge = !p.track && rng() % 5 == 0;
  if (rng() % 3 == 0) {
    p.fault_rank = int(rng() % uint64_t(p.nranks));
    const int countdown = 1 + int(rng() % 6);
    switch (rng() % 4) {
      case 0: p.fault.create_layout = countdown; break;
      case 1: p.fault.create_buffer = countdown; break;
      case 2: p.fault.gather = countdown; break;
      default: p.fault.capture_status = countdown + 4; break;
    }
  }
  const int tensors = 5;
  for (int t = 0; t < tensors; ++t) {
    // Multiples of the rank count (reduce-scatter and all-gather); distinct when learning, so that
    // every learned signature belongs to one tensor (learning is exact only on stable patterns).
    const uint64_t count = uint64_t(p.nranks) * (p.track ? 40 + 13 * uint64_t(t) : (rng() % 2 ? 60 : 96));
    p.counts.push_back(count);
    p.masks.push_back(random_mask(rng, count));
  }
  std::vector<bool> alive(tensors, false);
  auto live_tensor = [&]() -> int {
    std::vector<int> live;
    for (int t = 0; t < tensors; ++t)
      if (alive[size_t(t)]) live.push_back(t);
    return live.empty() ? -1 : live[rng() % live.size()];
  };
  auto collective = [&](int t) {
    Collective c{Coll::kAllReduce, t, ReduceOp::kSum};
    const uint64_t pick = rng() % 10;
    if (pick < 2 && !p.track) c.coll = Coll::kReduceScatter;
    else if (pick < 3 && !p.track) c.coll = Coll::kAllGather;
    else if (pick < 4) c.op = ReduceOp::kAvg;
    else if (pick < 5 && !p.track) c.op = ReduceOp::kMax;
    return c;
  };
  // Distinct live tensors for a group or capture body (one buffer twice in a group is undefined).
  auto body = [&](size_t n) {
    std::vector<Collective> out;
    std::vector<int> used;
    for (size_t i = 0; i < n; ++i) {
      const int t = live_tensor();
      if (t < 0 || std::find(used.begin(), used.end(), t) != used.end()) continue;
      used.push_back(t);
      out.push_back(collective(t));
    }
    return out;
  };
  for (int i = 0; i < 70; ++i) {
    Step s;
    const uint64_t pick = rng() % 100;
    const int t = int(rng() % tensors);
    if (pick < 12) {
      s.kind = alive[size_t(t)] ? Kind::kFree : Kind::kAlloc;
      s.tensor = t;
      alive[size_t(t)] = !alive[size_t(t)];
    } else if (pick < 24) {
      s.kind = Kind::kPublish;
      s.tensor = live_tensor();
      if (s.tensor < 0) continue;
      // A new pruning step: the tensor's zeros change with its published mask. Learned runs keep
      // every pattern fixed (a changed pattern is a violation there, by design).
      if (!p.track && rng() % 3 == 0) p.masks.push_back(random_mask(rng, p.counts[size_t(s.tensor)])), s.flags = 1;
    } else if (pick < 30) {
      s.kind = Kind::kRetract;
      s.tensor = live_tensor();
      if (s.tensor < 0) continue;
    } else if (pick < 40) {
      s.kind = Kind::kCommit;
      s.flags = p.merge ? SIEVE_COMMIT_UNION : 0;
    } else if (pick < 75) {
      s.kind = Kind::kCollective;
      const int live = live_tensor();
      if (live < 0) continue;
      s.body.push_back(collective(live));
    } else if (pick < 86) {
      s.kind = Kind::kGroup;
      s.body = body(1 + rng() % 3);
      if (s.body.empty()) continue;
      if (rng() % 4 == 0) s.commit_inside = int(rng() % s.body.size());
      s.nested = rng() % 3 == 0;
      s.flags = p.merge ? SIEVE_COMMIT_UNION : 0;
    } else if (pick < 91) {
      s.kind = Kind::kSimulatedGroup;
      s.body = body(1 + rng() % 2);
      if (s.body.empty()) continue;
    } else {
      s.kind = Kind::kCapture;
      s.body = body(1 + rng() % 2);
      if (s.body.empty()) continue;
    }
    p.steps.push_back(std::move(s));
  }
  return p;
}

// One rank running a program.
class Runner {
 public:
  Runner(const Program& p, Rank& rank, uint64_t seed)
      : p_(p), r_(rank), alloc_rng_(seed * 7919 + uint64_t(rank.rank)), pool_(6 * 1024), used_(6, false),
        slot_(p.counts.size(), -1), ids_(p.counts.size(), 0), mask_of_(p.counts.size()), recv_(p.counts.size() * 1024) {
    for (size_t t = 0; t < p.counts.size(); ++t) mask_of_[t] = t;  // index into p.masks
  }

  // Index of the first step that failed (or -1), after running the whole program and a final
  // all-reduce: a rank whose last steps needed no communication learns of an abort there.
  int run() {
    int mask_cursor = int(p_.counts.size());
    for (size_t i = 0; i < p_.steps.size(); ++i) {
      const Step& s = p_.steps[i];
      if (s.kind == Kind::kPublish && s.flags == 1) mask_of_[size_t(s.tensor)] = size_t(mask_cursor++);
      if (!step(s)) return int(i);
      if (::testing::Test::HasFatalFailure()) return int(i);
    }
    float barrier = 1.0f;
    if (!ok(r_.proxy.all_reduce(&barrier, &barrier, 1, ElemType::kF32, ReduceOp::kSum, kComm, kStream)))
      return int(p_.steps.size());
    EXPECT_EQ(barrier, float(p_.nranks));
    return -1;
  }

 private:
  // This rank's mask of tensor t: with union commits each rank adds its own elements.
  compress::Mask mask(int t) const {
    compress::Mask m = p_.masks[mask_of_[size_t(t)]];
    if (p_.merge) m.set_range(uint64_t(r_.rank) * 7 % m.count(), 5, true);
    return m;
  }
  compress::Mask mask_of_rank(int t, int rank) const {
    compress::Mask m = p_.masks[mask_of_[size_t(t)]];
    if (p_.merge) m.set_range(uint64_t(rank) * 7 % m.count(), 5, true);
    return m;
  }
  static float value(int rank, uint64_t i, int tick) { return float(rank + 1) * 0.25f + float(i % 11) + float(tick % 7); }
  float* buffer(int t) { return pool_.data() + size_t(slot_[size_t(t)]) * 1024; }
  float* recv(int t) { return recv_.data() + size_t(t) * 1024; }  // reduce-scatter outputs

  void fill(int t, int tick) {
    const compress::Mask m = mask(t);
    float* b = buffer(t);
    for (uint64_t i = 0; i < m.count(); ++i) b[i] = m.test(i) ? value(r_.rank, i, tick) : -0.0f;
  }
  float input(int t, int rank, uint64_t i, int tick) const {
    return mask_of_rank(t, rank).test(i) ? value(rank, i, tick) : 0.0f;
  }
  // The dense result, computed as the fake world computes it (same order, same arithmetic).
  float reduced(int t, uint64_t i, ReduceOp op, int tick) const {
    float acc = input(t, 0, i, tick);
    for (int q = 1; q < p_.nranks; ++q) {
      const float v = input(t, q, i, tick);
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    return op == ReduceOp::kAvg ? acc / float(p_.nranks) : acc;
  }

  int issue(const Collective& c, int tick) {
    fill(c.tensor, tick);
    const uint64_t count = p_.counts[size_t(c.tensor)], shard = count / uint64_t(p_.nranks);
    float* b = buffer(c.tensor);
    switch (c.coll) {
      case Coll::kAllReduce:
        return r_.proxy.all_reduce(b, b, count, ElemType::kF32, c.op, kComm, kStream);
      case Coll::kReduceScatter:
        return r_.proxy.reduce_scatter(b, recv(c.tensor), shard, ElemType::kF32, c.op, kComm, kStream);
      case Coll::kAllGather:
        return r_.proxy.all_gather(b + uint64_t(r_.rank) * shard, b, shard, ElemType::kF32, kComm, kStream);
    }
    return kResultInvalidArgument;
  }

  void check(const Collective& c, int tick) {
    const uint64_t count = p_.counts[size_t(c.tensor)], shard = count / uint64_t(p_.nranks);
    const float* b = buffer(c.tensor);
    switch (c.coll) {
      case Coll::kAllReduce:
        for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(b[i], reduced(c.tensor, i, c.op, tick)) << "all-reduce element " << i;
        break;
      case Coll::kReduceScatter:
        for (uint64_t j = 0; j < shard; ++j)
          ASSERT_EQ(recv(c.tensor)[j], reduced(c.tensor, uint64_t(r_.rank) * shard + j, c.op, tick)) << "reduce-scatter " << j;
        break;
      case Coll::kAllGather:
        for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(b[i], input(c.tensor, int(i / shard), i, tick)) << "all-gather " << i;
        break;
    }
  }

  bool ok(int rc) { return r_.settle(rc) == kResultSuccess; }

  bool step(const Step& s) {
    const int tick = ++tick_;
    switch (s.kind) {
      case Kind::kAlloc: {
        // This rank's allocator: any free slot, chosen by this rank's own history.
        std::vector<int> free;
        for (int k = 0; k < int(used_.size()); ++k)
          if (!used_[size_t(k)]) free.push_back(k);
        const int k = free[alloc_rng_() % free.size()];
        used_[size_t(k)] = true;
        slot_[size_t(s.tensor)] = k;
        return true;
      }
      case Kind::kFree:
        // The binding retracts a dying tensor's mask by id.
        if (ids_[size_t(s.tensor)]) r_.registry.retract_id(ids_[size_t(s.tensor)]);
        ids_[size_t(s.tensor)] = 0;
        used_[size_t(slot_[size_t(s.tensor)])] = false;
        slot_[size_t(s.tensor)] = -1;
        return true;
      case Kind::kPublish:
        ids_[size_t(s.tensor)] = r_.publish(buffer(s.tensor), mask(s.tensor));
        return true;
      case Kind::kRetract:
        if (ids_[size_t(s.tensor)]) r_.registry.retract_id(ids_[size_t(s.tensor)]);
        ids_[size_t(s.tensor)] = 0;
        return true;
      case Kind::kCommit:
        r_.commit(s.flags);
        return true;
      case Kind::kCollective:
        if (!ok(issue(s.body[0], tick))) return false;
        check(s.body[0], tick);
        return true;
      case Kind::kGroup: {
        bool good = r_.proxy.group_start() == 0 && (!s.nested || r_.proxy.group_start() == 0);
        for (size_t k = 0; k < s.body.size() && good; ++k) {
          if (int(k) == s.commit_inside) r_.commit(s.flags);
          good = issue(s.body[k], tick) == kResultSuccess;
        }
        if (s.nested) good = (r_.proxy.group_end() == 0) && good;
        good = ok(r_.proxy.group_end()) && good;
        if (!good) return false;
        for (const Collective& c : s.body) check(c, tick);
        return true;
      }
      case Kind::kSimulatedGroup: {
        std::vector<std::vector<float>> before;
        bool good = r_.proxy.group_start() == 0;
        for (const Collective& c : s.body) {
          good = good && issue(c, tick) == kResultSuccess;
          before.emplace_back(buffer(c.tensor), buffer(c.tensor) + p_.counts[size_t(c.tensor)]);
        }
        good = r_.proxy.group_simulate_end(nullptr) == 0 && good;
        if (!good) return false;
        for (size_t k = 0; k < s.body.size(); ++k)
          EXPECT_TRUE(std::equal(before[k].begin(), before[k].end(), buffer(s.body[k].tensor))) << "a simulated group wrote";
        return true;
      }
      case Kind::kCapture: {
        r_.backend.begin_capture();
        bool good = true;
        for (const Collective& c : s.body) good = good && issue(c, tick) == kResultSuccess;
        r_.backend.end_capture();
        if (!good) return false;
        for (int replay = 1; replay <= 2; ++replay) {
          for (const Collective& c : s.body) fill(c.tensor, tick + replay * 100);
          if (r_.backend.replay() != 0) return false;
          // Replays reduce the buffers as they are now; all-gather's input is the rank's shard.
          for (const Collective& c : s.body) check(c, tick + replay * 100);
        }
        return true;
      }
    }
    return true;
  }

  const Program& p_;
  Rank& r_;
  std::mt19937_64 alloc_rng_;
  std::vector<float> pool_;
  std::vector<bool> used_;
  std::vector<int> slot_;
  std::vector<uint64_t> ids_;
  std::vector<size_t> mask_of_;
  std::vector<float> recv_;
  int tick_ = 0;
};

void run_program(uint64_t seed) {
  const Program p = generate(seed);
  FakeWorld world(p.nranks);
  ProxyOptions o = test_options();
  o.track = p.track;
  o.track_stable = 2;
  o.track_lag = 1 + uint32_t(seed % 2);
  auto ranks = make_ranks(world, o);
  for (auto& r : ranks) r->backend.nonblocking = p.nonblocking;
  if (p.fault_rank >= 0) ranks[size_t(p.fault_rank)]->backend.faults = p.fault;
  std::vector<int> failed_at(size_t(p.nranks), -2);
  run_ranks(ranks, [&](Rank& r) { failed_at[size_t(r.rank)] = Runner(p, r, seed).run(); });
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(p.nranks) + " ranks" +
               (p.nonblocking ? ", non-blocking" : "") + (p.track ? ", learning" : "") + (p.merge ? ", union" : "") +
               (p.fault_rank >= 0 ? ", a fault on rank " + std::to_string(p.fault_rank) : ""));
  EXPECT_EQ(world.mismatches(), 0u) << "ranks issued different collectives";
  // Either every rank ran everything, or every rank got an error: in the step that failed, or at
  // its next step that communicates (at the latest the final all-reduce).
  for (int r = 1; r < p.nranks; ++r)
    EXPECT_EQ(failed_at[size_t(r)] < 0, failed_at[0] < 0) << "rank " << r << " and rank 0 disagree on success";
  if (failed_at[0] < 0) {
    EXPECT_FALSE(world.aborted());
    for (int r = 1; r < p.nranks; ++r) EXPECT_EQ(ranks[size_t(r)]->backend.log, ranks[0]->backend.log) << "rank " << r;
  } else {
    EXPECT_TRUE(world.aborted()) << "an error on every rank means an abort (the only error injected here)";
  }
}

class Consistency : public ::testing::TestWithParam<int> {};

TEST_P(Consistency, RandomProgramsNeverMakeRanksDiverge) {
  for (uint64_t seed = uint64_t(GetParam()) * 40; seed < uint64_t(GetParam() + 1) * 40; ++seed) {
    run_program(seed);
    if (HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, Consistency, ::testing::Range(0, 5));

}  // namespace
}  // namespace sieve::plugin::proxy
