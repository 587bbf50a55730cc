// SPDX-License-Identifier: Apache-2.0
// The first law of the proxy as a property: for random programs — publishes, commits, retracts,
// frees with address reuse that differs per rank, groups (nested, simulated, with stream work before
// their end, with one buffer read twice), captures and replays, non-blocking communicators, learned
// masks, a second communicator driven by a second thread that commits at its own points, settings
// that differ on one rank, a rank that publishes nothing, retractions on one rank only, injected
// failures on one rank, and an abort from a watchdog thread at a random moment — every rank issues
// the same collectives with the same counts on each communicator (masks of collectives on fresh
// buffers, FSDP's pattern, included) (the fake world fails any mismatch,
// and every rank's log of real collectives is compared), or every rank gets an error; an abort
// returns within a second; and every result equals the dense reference exactly. Also:
// each rank hands its communicator's steps between threads at its own random points (only the order
// on the communicator may decide); masks may be published for one communicator (scoped), also from
// the second communicator's thread; and SIEVE_PROXY_VERIFY on every rank with one rank holding a
// nonzero where its mask prunes (every rank must fail, together).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "plugin/sieve.h"
#include "tests/common/liveness.h"
#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

Comm const kSide = reinterpret_cast<Comm>(0x5000);

enum class Kind { kAlloc, kFree, kPublish, kRetract, kCommit, kCollective, kGroup, kSimulatedGroup, kCapture };
enum class Coll { kAllReduce, kAllReduceOut, kReduceScatter, kAllGather };

struct Collective {
  Coll coll;
  int tensor;
  ReduceOp op;
  int out = 0;         // kAllReduceOut: which of the tensor's two output buffers
  bool fresh = false;  // reduce-scatter, all-gather: on a buffer allocated for this call (FSDP)
};

// Step::flags of a publish: a new pruning pattern; masks of the tensor's collectives, not its buffer.
constexpr uint32_t kNewPattern = 1, kCollectiveMasks = 2;

struct Step {
  Kind kind;
  int tensor = -1;
  uint32_t flags = 0;
  std::vector<Collective> body;  // kCollective (one), kGroup, kSimulatedGroup, kCapture
  int commit_inside = -1;        // kGroup: commit after this many collectives of the body
  bool nested = false;           // kGroup: the body runs inside two levels of groups
  bool scale = false;            // kGroup: stream work doubles every input before the group's end
  int only_rank = -1;            // kRetract: on this rank only
};

struct Program {
  int nranks = 2;
  bool nonblocking = false;
  bool track = false;
  bool merge = false;             // SIEVE_COMMIT_UNION: ranks' masks differ
  bool collective_masks = false;  // some publishes name collectives (then every tensor has its own shape)
  bool scoped = false;            // publishes name their communicator
  bool verify = false;            // SIEVE_PROXY_VERIFY on every rank ...
  int liar_rank = -1;             // ... and this rank's values break its mask at one element
  int fault_rank = -1;
  FakeFaults fault;
  int odd_rank = -1, odd_setting = 0;  // a rank whose settings differ: every commit is refused
  int idle_rank = -1;                  // a rank that publishes nothing
  int abort_rank = -1, abort_after_us = 0;
  std::vector<uint64_t> counts;       // per tensor; tensors kSideFirst.. belong to the side communicator
  std::vector<compress::Mask> masks;  // per tensor: where values may be nonzero (before union extras)
  std::vector<Step> steps, side_steps;
};

constexpr int kMainTensors = 5, kSideTensors = 2, kSideFirst = kMainTensors;

compress::Mask random_mask(std::mt19937_64& rng, uint64_t count) {
  compress::Mask m(count, false);
  const int kind = int(rng() % 3);
  if (kind == 0) m = compress::Mask(count, true);  // dense tensor (biases)
  const double density = 0.1 + double(rng() % 50) / 100.0;
  for (uint64_t i = 0; i < count && kind != 0; ++i)
    if (kind == 1 ? double(rng() % 1000) < density * 1000 : (i / 16) % 3 == 0) m.set_range(i, 1, true);
  return m;
}

// Steps over tensors [first, first + n); `rich`: groups, captures and collectives of every kind.
std::vector<Step> generate_steps(std::mt19937_64& rng, Program& p, int first, int n, int length, bool rich) {
  std::vector<Step> steps;
  std::vector<bool> alive(size_t(n), false);
  auto live_tensor = [&]() -> int {
    std::vector<int> live;
    for (int t = 0; t < n; ++t)
      if (alive[size_t(t)]) live.push_back(first + t);
    return live.empty() ? -1 : live[rng() % live.size()];
  };
  auto collective = [&](int t) {
    Collective c{Coll::kAllReduce, t, ReduceOp::kSum};
    const uint64_t pick = rng() % 10;
    if (pick < 2 && !p.track && rich) c.coll = Coll::kReduceScatter;
    else if (pick < 3 && !p.track && rich) c.coll = Coll::kAllGather;
    else if (pick < 4) c.op = ReduceOp::kAvg;
    else if (pick < 5 && !p.track) c.op = ReduceOp::kMax;
    else if (pick < 6) c.coll = Coll::kAllReduceOut;
    c.fresh = p.collective_masks && rng() % 2 == 0;
    return c;
  };
  // Distinct live tensors, but for one legal exception: one send buffer read by two out-of-place
  // all-reduces (a sum and a max) of the same group.
  auto body = [&](size_t k) {
    std::vector<Collective> out;
    std::vector<int> used;
    for (size_t i = 0; i < k; ++i) {
      const int t = live_tensor();
      if (t < 0 || std::find(used.begin(), used.end(), t) != used.end()) continue;
      used.push_back(t);
      if (rng() % 5 == 0 && !p.track) {
        out.push_back(Collective{Coll::kAllReduceOut, t, ReduceOp::kSum, 0});
        out.push_back(Collective{Coll::kAllReduceOut, t, ReduceOp::kMax, 1});
      } else {
        out.push_back(collective(t));
      }
    }
    return out;
  };
  for (int i = 0; i < length; ++i) {
    Step s;
    const uint64_t pick = rng() % 100;
    const int t = first + int(rng() % uint64_t(n));
    if (pick < 12) {
      s.kind = alive[size_t(t - first)] ? Kind::kFree : Kind::kAlloc;
      s.tensor = t;
      alive[size_t(t - first)] = !alive[size_t(t - first)];
    } else if (pick < 24) {
      s.kind = Kind::kPublish;
      s.tensor = live_tensor();
      if (s.tensor < 0) continue;
      // A new pruning step: the tensor's zeros change with its published mask. Learned runs keep
      // every pattern fixed (a changed pattern is a violation there, by design).
      if (!p.track && rng() % 3 == 0)
        p.masks.push_back(random_mask(rng, p.counts[size_t(s.tensor)])), s.flags = kNewPattern;
      if (p.collective_masks && rng() % 2 == 0) s.flags |= kCollectiveMasks;
    } else if (pick < 30) {
      s.kind = Kind::kRetract;
      s.tensor = live_tensor();
      if (s.tensor < 0) continue;
      if (rng() % 4 == 0) s.only_rank = int(rng() % uint64_t(p.nranks));
    } else if (pick < 40) {
      s.kind = Kind::kCommit;
      s.flags = p.merge ? SIEVE_COMMIT_UNION : 0;
    } else if (pick < 75 || !rich) {
      s.kind = Kind::kCollective;
      const int live = live_tensor();
      if (live < 0) continue;
      s.body.push_back(collective(live));
      if (!rich && s.body[0].coll != Coll::kAllReduceOut) s.body[0].coll = Coll::kAllReduce;
    } else if (pick < 86) {
      s.kind = Kind::kGroup;
      s.body = body(1 + rng() % 3);
      if (s.body.empty()) continue;
      if (rng() % 4 == 0) s.commit_inside = int(rng() % s.body.size());
      s.nested = rng() % 3 == 0;
      s.scale = rng() % 3 == 0;
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
    steps.push_back(std::move(s));
  }
  return steps;
}

Program generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Program p;
  p.nranks = 2 + int(rng() % 7);
  p.nonblocking = rng() % 4 == 0;
  p.track = rng() % 4 == 0;
  p.merge = !p.track && rng() % 5 == 0;
  p.collective_masks = !p.track && !p.merge && rng() % 3 == 0;
  p.scoped = rng() % 2 == 0;
  p.verify = !p.track && !p.merge && rng() % 5 == 0;
  if (p.verify && rng() % 2 == 0) p.liar_rank = int(rng() % uint64_t(p.nranks));
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
  if (rng() % 6 == 0) p.odd_rank = int(rng() % uint64_t(p.nranks)), p.odd_setting = int(rng() % 4);
  if (p.verify && p.odd_setting == 2) p.odd_rank = -1;
  if (rng() % 8 == 0) p.idle_rank = int(rng() % uint64_t(p.nranks));
  if (rng() % 6 == 0) p.abort_rank = int(rng() % uint64_t(p.nranks)), p.abort_after_us = int(rng() % 20000);
  for (int t = 0; t < kMainTensors + kSideTensors; ++t) {
    // Multiples of the rank count (reduce-scatter and all-gather); distinct when learning, so that
    // every learned signature belongs to one tensor (learning is exact only on stable patterns).
    // With collective masks too: a collective's shape then names one tensor.
    // Shapes stay distinct with collective masks: a mask of a shape is a promise about every call of
    // that shape, which tensors sharing one would break whenever only one of them has published.
    // Identical layers (several different masks of one shape, skipped and repeated calls) are
    // tests/plugin/proxy/fsdp_test.cc's.
    const bool distinct = p.track || p.collective_masks;
    const uint64_t count = uint64_t(p.nranks) * (distinct ? 40 + 13 * uint64_t(t) : (rng() % 2 ? 60 : 96));
    p.counts.push_back(count);
    p.masks.push_back(random_mask(rng, count));
  }
  p.steps = generate_steps(rng, p, 0, kMainTensors, 70, true);
  if (rng() % 3 == 0) p.side_steps = generate_steps(rng, p, kSideFirst, kSideTensors, 25, false);
  return p;
}

ProxyOptions options_of(const Program& p, int rank, uint64_t seed) {
  ProxyOptions o = test_options();
  o.track = p.track ? config::Track::kOn : config::Track::kOff;
  o.track_stable = 2;
  o.track_lag = 1 + uint32_t(seed % 2);
  o.verify = p.verify;
  if (rank == p.odd_rank) {
    switch (p.odd_setting) {
      case 0: o.rules.max_density = 0.5; break;
      case 1: o.track = p.track ? config::Track::kOff : config::Track::kOn; break;
      case 2: o.verify = true; break;
      default: o.enabled = false; break;
    }
  }
  return o;
}

// One rank running one communicator's program on one thread.
class Runner {
 public:
  static constexpr size_t kSlot = 1024, kSlots = 32;

  Runner(const Program& p, const std::vector<Step>& steps, Rank& rank, Comm comm, uint64_t seed)
      : p_(p),
        steps_(steps),
        r_(rank),
        comm_(comm),
        alloc_rng_(seed * 7919 + uint64_t(rank.rank)),
        thread_rng_(seed * 104729 + uint64_t(rank.rank)),
        pool_(kSlots * kSlot),
        owner_(kSlots, -1),
        slot_(p.counts.size(), -1),
        ids_(p.counts.size(), 0),
        mask_of_(p.counts.size()),
        pending_(p.counts.size(), kNone),
        out_(2 * p.counts.size() * kSlot) {
    for (size_t t = 0; t < p.counts.size(); ++t) mask_of_[t] = t;  // index into p.masks
  }

  // Index of the first step that failed (or -1), after running the whole program and a final
  // all-reduce: a rank whose last steps needed no communication learns of an abort there.
  int run() {
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      // A new pruning pattern reaches the tensor's values when it takes effect: at the next commit
      // (until then the agreed mask is in force, and the trainer keeps to it).
      if (s.kind == Kind::kPublish && (s.flags & kNewPattern)) pending_[size_t(s.tensor)] = next_mask(s);
      // This rank hands the communicator's next step to another thread at its own random points.
      bool good = true;
      if (thread_rng_() % 4 == 0) {
        std::thread other([&] { good = step(s); });
        other.join();
      } else {
        good = step(s);
      }
      if (!good) return int(i);
      if (::testing::Test::HasFatalFailure()) return int(i);
    }
    // Max, not sum: a learned signature's work after its collective (a record, which an injected
    // fault can fail) would make the last call fail on one rank after every rank completed it.
    float barrier = float(r_.rank + 1);
    if (!ok(r_.proxy.all_reduce(&barrier, &barrier, 1, DType::kF32, ReduceOp::kMax, comm_, kStream)))
      return int(steps_.size());
    EXPECT_EQ(barrier, float(p_.nranks));
    return -1;
  }

 private:
  // The masks a program adds are numbered in step order, from after the tensors' own.
  size_t next_mask(const Step& s) const {
    size_t index = p_.counts.size();
    for (const Step& other : p_.steps) {
      if (&other == &s) return index;
      if (other.kind == Kind::kPublish && (other.flags & kNewPattern)) ++index;
    }
    for (const Step& other : p_.side_steps) {
      if (&other == &s) return index;
      if (other.kind == Kind::kPublish && (other.flags & kNewPattern)) ++index;
    }
    return index;
  }
  // This rank's mask of tensor t: with union commits each rank adds its own elements.
  compress::Mask mask_of_rank(int t, int rank, bool published = false) const {
    const size_t index = published && pending_[size_t(t)] != kNone ? pending_[size_t(t)] : mask_of_[size_t(t)];
    compress::Mask m = p_.masks[index];
    if (p_.merge) m.set_range(uint64_t(rank) * 7 % m.count(), 5, true);
    return m;
  }
  compress::Mask mask(int t) const { return mask_of_rank(t, r_.rank); }
  static float value(int rank, uint64_t i, int tick) {
    return float(rank + 1) * 0.25f + float(i % 11) + float(tick % 7);
  }
  // The liar's one value where its mask prunes (the first pruned element), outside captures (a graph
  // cannot verify: docs/DESIGN.md); every other rank, and every other element, keeps to its mask.
  bool lies(int t, int rank, uint64_t i) const {
    if (rank != p_.liar_rank || !lying_) return false;
    const compress::Mask m = mask_of_rank(t, rank);
    for (uint64_t k = 0; k < m.count(); ++k)
      if (!m.test(k)) return k == i;
    return false;
  }
  float* buffer(int t) { return pool_.data() + size_t(slot_[size_t(t)]) * kSlot; }
  float* out(int t, int k) { return out_.data() + (2 * size_t(t) + size_t(k)) * kSlot; }  // outputs

  void fill(int t, int tick) {
    const compress::Mask m = mask(t);
    float* b = buffer(t);
    for (uint64_t i = 0; i < m.count(); ++i)
      b[i] = m.test(i) ? value(r_.rank, i, tick) : lies(t, r_.rank, i) ? 1000.0f : -0.0f;
  }
  float input(int t, int rank, uint64_t i, int tick, float scale) const {
    if (lies(t, rank, i)) return 1000.0f * scale;
    return mask_of_rank(t, rank).test(i) ? value(rank, i, tick) * scale : 0.0f;
  }
  // The dense result, computed as the fake world computes it (same order, same arithmetic; avg
  // scales each input first, as NCCL does for floats).
  float reduced(int t, uint64_t i, ReduceOp op, int tick, float scale) const {
    auto in = [&](int q) {
      const float v = input(t, q, i, tick, scale);
      return op == ReduceOp::kAvg ? v / float(p_.nranks) : v;
    };
    float acc = in(0);
    for (int q = 1; q < p_.nranks; ++q) acc = op == ReduceOp::kMax ? std::max(acc, in(q)) : acc + in(q);
    return acc;
  }

  int issue(const Collective& c, int tick, bool refill = true) {
    if (refill) fill(c.tensor, tick);
    const uint64_t count = p_.counts[size_t(c.tensor)], shard = count / uint64_t(p_.nranks);
    float* b = buffer(c.tensor);
    switch (c.coll) {
      case Coll::kAllReduce: return r_.proxy.all_reduce(b, b, count, DType::kF32, c.op, comm_, kStream);
      case Coll::kAllReduceOut:
        return r_.proxy.all_reduce(b, out(c.tensor, c.out), count, DType::kF32, c.op, comm_, kStream);
      case Coll::kReduceScatter:
        if (c.fresh) b = fresh(b, count);
        return r_.proxy.reduce_scatter(b, out(c.tensor, 0), shard, DType::kF32, c.op, comm_, kStream);
      case Coll::kAllGather:
        if (c.fresh) {  // gathered into a fresh buffer, then copied where the check reads it
          float* f = fresh(b, count);
          copies_.push_back({f, b, count});
          b = f;
        }
        return r_.proxy.all_gather(b + uint64_t(r_.rank) * shard, b, shard, DType::kF32, comm_, kStream);
    }
    return kResultInvalidArgument;
  }

  // A buffer allocated for one call, holding what `from` holds: kept until the step's results are in.
  float* fresh(const float* from, uint64_t count) {
    fresh_.emplace_back(from, from + count);
    return fresh_.back().data();
  }
  // Results gathered into fresh buffers go back to the tensor's own, after the group's end.
  void settle_fresh() {
    for (const Copy& c : copies_) std::copy(c.from, c.from + c.count, c.to);
    copies_.clear();
    fresh_.clear();
  }

  void check(const Collective& c, int tick, float scale = 1.0f) {
    const uint64_t count = p_.counts[size_t(c.tensor)], shard = count / uint64_t(p_.nranks);
    const float* b = buffer(c.tensor);
    switch (c.coll) {
      case Coll::kAllReduce:
        for (uint64_t i = 0; i < count; ++i)
          ASSERT_EQ(b[i], reduced(c.tensor, i, c.op, tick, scale))
              << "all-reduce of tensor " << c.tensor << ", element " << i;
        break;
      case Coll::kAllReduceOut:
        for (uint64_t i = 0; i < count; ++i)
          ASSERT_EQ(out(c.tensor, c.out)[i], reduced(c.tensor, i, c.op, tick, scale)) << "out-of-place element " << i;
        break;
      case Coll::kReduceScatter:
        for (uint64_t j = 0; j < shard; ++j)
          ASSERT_EQ(out(c.tensor, 0)[j], reduced(c.tensor, uint64_t(r_.rank) * shard + j, c.op, tick, scale))
              << "reduce-scatter " << j;
        break;
      case Coll::kAllGather:
        for (uint64_t i = 0; i < count; ++i)
          ASSERT_EQ(b[i], input(c.tensor, int(i / shard), i, tick, scale)) << "all-gather " << i;
        break;
    }
  }

  bool ok(int rc) { return r_.settle(rc, comm_) == kResultSuccess; }

  // The binding frees a retracted tensor's memory only once no agreed table holds its mask.
  bool reusable(int k) const {
    if (owner_[size_t(k)] >= 0) return false;
    for (const auto& [slot, id] : retiring_) {
      bool released = false;
      if (slot == k && !(r_.registry.released(id, &released).ok() && released)) return false;
    }
    return true;
  }

  bool step(const Step& s) {
    const int tick = ++tick_;
    if (getenv("TRACE_STEPS") && r_.rank == 0)
      fprintf(stderr, "step %d kind %d tensor %d flags %u only %d body %zu commit_inside %d comm %p slot %d\n", tick,
              int(s.kind), s.tensor, s.flags, s.only_rank, s.body.size(), s.commit_inside, comm_,
              s.tensor >= 0 ? slot_[size_t(s.tensor)] : -9);
    if (getenv("TRACE_STEPS") && r_.rank == 0)
      for (const Collective& c : s.body)
        fprintf(stderr, "   coll %d tensor %d op %d out %d count %llu mask %zu slot %d\n", int(c.coll), c.tensor,
                int(c.op), c.out, (unsigned long long)p_.counts[size_t(c.tensor)], mask_of_[size_t(c.tensor)],
                slot_[size_t(c.tensor)]);
    switch (s.kind) {
      case Kind::kAlloc: {
        // This rank's allocator: any reusable slot, chosen by this rank's own history.
        std::vector<int> free;
        for (int k = 0; k < int(kSlots); ++k)
          if (reusable(k)) free.push_back(k);
        if (free.empty()) {
          ADD_FAILURE() << "no reusable slot";
          return false;
        }
        const int k = free[alloc_rng_() % free.size()];
        retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(), [k](const auto& e) { return e.first == k; }),
                        retiring_.end());
        owner_[size_t(k)] = s.tensor;
        slot_[size_t(s.tensor)] = k;
        return true;
      }
      case Kind::kFree:
        retract(s.tensor);
        owner_[size_t(slot_[size_t(s.tensor)])] = -1;
        slot_[size_t(s.tensor)] = -1;
        return true;
      case Kind::kPublish: {
        if (r_.rank == p_.idle_rank) return true;
        retract(s.tensor);
        const compress::Mask m = mask_of_rank(s.tensor, r_.rank, /*published=*/true);
        if (!(s.flags & kCollectiveMasks)) {
          EXPECT_TRUE(r_.registry
                          .publish(buffer(s.tensor), compress::DType::kF32, std::make_shared<const compress::Mask>(m),
                                   &ids_[size_t(s.tensor)], p_.scoped ? comm_scope(comm_) : 0)
                          .ok());
          return true;
        }
        for (compress::Collective target : {compress::Collective::kReduceScatter, compress::Collective::kAllGather}) {
          uint64_t id = 0;
          EXPECT_TRUE(r_.registry
                          .publish_collective(target, compress::DType::kF32, std::make_shared<const compress::Mask>(m),
                                              &id, p_.scoped ? comm_scope(comm_) : 0)
                          .ok());
          collective_ids_[size_t(s.tensor)].push_back(id);
        }
        return true;
      }
      case Kind::kRetract:
        if (s.only_rank < 0 || s.only_rank == r_.rank) retract(s.tensor);
        return true;
      case Kind::kCommit: take_pending(); return ok(r_.proxy.commit(comm_, kStream, s.flags, nullptr));
      case Kind::kCollective:
        if (!ok(issue(s.body[0], tick))) return false;
        settle_fresh();
        check(s.body[0], tick);
        return true;
      case Kind::kGroup: {
        bool good = r_.proxy.group_start() == 0 && (!s.nested || r_.proxy.group_start() == 0);
        for (const Collective& c : s.body) fill(c.tensor, tick);
        for (size_t k = 0; k < s.body.size() && good; ++k) {
          if (int(k) == s.commit_inside) good = r_.proxy.commit(comm_, kStream, s.flags, nullptr) == 0;
          good = good && enqueued(issue(s.body[k], tick, /*refill=*/false));
        }
        if (s.scale) {  // stream work after the calls, before the launch: NCCL reads it at the launch
          for (const Collective& c : s.body)
            if (c.out == 0) {
              float* b = buffer(c.tensor);
              for (uint64_t i = 0; i < p_.counts[size_t(c.tensor)]; ++i) b[i] *= 2.0f;
            }
          for (std::vector<float>& f : fresh_)
            for (float& v : f) v *= 2.0f;
        }
        if (s.nested) good = (r_.proxy.group_end() == 0) && good;
        good = ok(r_.proxy.group_end()) && good;
        settle_fresh();
        if (!good) return false;
        for (const Collective& c : s.body) check(c, tick, s.scale ? 2.0f : 1.0f);
        if (s.commit_inside >= 0) take_pending();  // its verdict applies from the group's end
        return true;
      }
      case Kind::kSimulatedGroup: {
        std::vector<std::vector<float>> before;
        bool good = r_.proxy.group_start() == 0;
        for (const Collective& c : s.body) {
          good = good && enqueued(issue(c, tick));
          before.emplace_back(buffer(c.tensor), buffer(c.tensor) + p_.counts[size_t(c.tensor)]);
        }
        good = r_.proxy.group_simulate_end(nullptr) == 0 && good;
        copies_.clear();  // nothing was gathered
        fresh_.clear();
        if (!good) return false;
        for (size_t k = 0; k < s.body.size(); ++k)
          EXPECT_TRUE(std::equal(before[k].begin(), before[k].end(), buffer(s.body[k].tensor)))
              << "a simulated group wrote";
        return true;
      }
      case Kind::kCapture: {
        lying_ = false;
        struct Restore {
          bool& flag;
          ~Restore() { flag = true; }
        } restore{lying_};
        r_.backend.begin_capture();
        bool good = true;
        for (const Collective& c : s.body) {
          Collective captured = c;
          captured.fresh = false;  // a graph's buffers are its own, fixed ones
          good = good && issue(captured, tick) == kResultSuccess;
        }
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

  void take_pending() {
    for (size_t t = 0; t < pending_.size(); ++t)
      if (pending_[t] != kNone) mask_of_[t] = pending_[t], pending_[t] = kNone;
  }

  void retract(int t) {
    for (uint64_t id : collective_ids_[size_t(t)]) EXPECT_TRUE(r_.registry.retract_id(id).ok());
    collective_ids_[size_t(t)].clear();
    if (!ids_[size_t(t)]) return;
    EXPECT_TRUE(r_.registry.retract_id(ids_[size_t(t)]).ok());
    retiring_.emplace_back(slot_[size_t(t)], ids_[size_t(t)]);
    ids_[size_t(t)] = 0;
  }

  const Program& p_;
  const std::vector<Step>& steps_;
  Rank& r_;
  const Comm comm_;
  std::mt19937_64 alloc_rng_;
  std::mt19937_64 thread_rng_;
  bool lying_ = true;
  std::vector<float> pool_;
  std::vector<int> owner_;                          // per slot: the live tensor in it, or -1
  std::vector<std::pair<int, uint64_t>> retiring_;  // slots of retracted masks a table may still use
  std::vector<int> slot_;
  std::vector<uint64_t> ids_;
  std::vector<std::vector<uint64_t>> collective_ids_ = std::vector<std::vector<uint64_t>>(p_.counts.size());
  struct Copy {
    const float* from;
    float* to;
    uint64_t count;
  };
  std::vector<std::vector<float>> fresh_;
  std::vector<Copy> copies_;
  static constexpr size_t kNone = ~size_t(0);
  std::vector<size_t> mask_of_;  // per tensor: the pattern its values follow (index into p.masks)
  std::vector<size_t> pending_;  // per tensor: a republished pattern waiting for the next commit
  std::vector<float> out_;
  int tick_ = 0;
};

void run_program(uint64_t seed) {
  const Program p = generate(seed);
  FakeWorld world(p.nranks), side(p.nranks);
  Ranks ranks;
  for (int r = 0; r < p.nranks; ++r) {
    ranks.push_back(std::make_unique<Rank>(world, r, options_of(p, r, seed)));
    ranks.back()->backend.join(kSide, side, r);
  }
  for (auto& r : ranks) r->backend.nonblocking = p.nonblocking;
  if (p.fault_rank >= 0) ranks[size_t(p.fault_rank)]->backend.faults = p.fault;
  std::unique_ptr<LogCapture> quiet;  // aborts and refusals log; the assertions below say what matters
  if (!getenv("TRACE_STEPS")) quiet = std::make_unique<LogCapture>();
  std::vector<int> failed_at(size_t(p.nranks), -2), side_failed_at(size_t(p.nranks), -1);
  std::thread watchdog;
  double abort_seconds = 0;
  if (p.abort_rank >= 0)
    watchdog = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(p.abort_after_us));
      Rank& r = *ranks[size_t(p.abort_rank)];
      const auto start = std::chrono::steady_clock::now();
      if (!r.proxy.release(kComm, "watchdog")) r.backend.abort_comm(kComm);
      r.proxy.forget(kComm);
      abort_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  run_ranks(ranks, [&](Rank& r) {
    std::thread side_thread;
    if (!p.side_steps.empty())
      side_thread =
          std::thread([&] { side_failed_at[size_t(r.rank)] = Runner(p, p.side_steps, r, kSide, seed + 1).run(); });
    failed_at[size_t(r.rank)] = Runner(p, p.steps, r, kComm, seed).run();
    if (side_thread.joinable()) side_thread.join();
  });
  if (watchdog.joinable()) watchdog.join();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(p.nranks) + " ranks" +
               (p.nonblocking ? ", non-blocking" : "") + (p.track ? ", learning" : "") + (p.merge ? ", union" : "") +
               (p.fault_rank >= 0 ? ", a fault on rank " + std::to_string(p.fault_rank) : "") +
               (p.odd_rank >= 0
                    ? ", setting " + std::to_string(p.odd_setting) + " differs on rank " + std::to_string(p.odd_rank)
                    : "") +
               (p.idle_rank >= 0 ? ", rank " + std::to_string(p.idle_rank) + " publishes nothing" : "") +
               (p.abort_rank >= 0 ? ", an abort on rank " + std::to_string(p.abort_rank) : "") +
               (p.side_steps.empty() ? "" : ", a second communicator") + (p.scoped ? ", scoped publishes" : "") +
               (p.verify ? ", verify" : "") +
               (p.liar_rank >= 0 ? ", rank " + std::to_string(p.liar_rank) + " breaks its mask" : ""));
  EXPECT_EQ(world.mismatches(), 0u) << "ranks issued different collectives";
  if (getenv("TRACE_STEPS"))
    for (auto& r : ranks) {
      fprintf(stderr, "rank %d:", r->rank);
      for (auto& e : r->backend.comm_log[kComm]) fprintf(stderr, " %s", e.c_str());
      fprintf(stderr, "\n");
    }
  EXPECT_EQ(side.mismatches(), 0u) << "ranks issued different collectives on the second communicator";
  EXPECT_LT(abort_seconds, liveness::bound(std::chrono::duration<double>(1.0)).count())
      << "an abort returns within a second";
  // Either every rank ran everything, or every rank got an error: in the step that failed, or at
  // its next step that communicates (at the latest the final all-reduce).
  for (int r = 1; r < p.nranks; ++r) {
    EXPECT_EQ(failed_at[size_t(r)] < 0, failed_at[0] < 0) << "rank " << r << " and rank 0 disagree on success";
    EXPECT_EQ(side_failed_at[size_t(r)] < 0, side_failed_at[0] < 0) << "rank " << r << " on the second communicator";
  }
  // The injected fault hits whichever of the rank's threads comes first; an abort hits the first.
  if (side_failed_at[0] < 0) {
    for (int r = 1; r < p.nranks; ++r)
      EXPECT_EQ(ranks[size_t(r)]->backend.comm_log[kSide], ranks[0]->backend.comm_log[kSide]) << "rank " << r;
  } else {
    EXPECT_TRUE(side.aborted()) << "an error on every rank means an abort (the only error injected here)";
  }
  if (failed_at[0] < 0) {
    if (p.abort_rank < 0) { EXPECT_FALSE(world.aborted()); }
    for (int r = 1; r < p.nranks; ++r)
      EXPECT_EQ(ranks[size_t(r)]->backend.comm_log[kComm], ranks[0]->backend.comm_log[kComm]) << "rank " << r;
  } else {
    EXPECT_TRUE(world.aborted()) << "an error on every rank means an abort (the only error injected here)";
  }
}

class Consistency : public ::testing::TestWithParam<int> {};

TEST_P(Consistency, RandomProgramsNeverMakeRanksDiverge) {
  if (const char* only = getenv("ONLY_SEED")) {
    if (GetParam() == 0) run_program(std::stoull(only));
    return;
  }
  for (uint64_t seed = uint64_t(GetParam()) * 40; seed < uint64_t(GetParam() + 1) * 40; ++seed) {
    run_program(seed);
    if (HasFailure()) break;
  }
}

// 25 cases of 40 seeds: 1,000 seeds.
INSTANTIATE_TEST_SUITE_P(Seeds, Consistency, ::testing::Range(0, 25));

}  // namespace
}  // namespace sieve::plugin::proxy
