// SPDX-License-Identifier: Apache-2.0
// Learned masks (SIEVE_TRACK) on the CPU: only after an agreed commit, keyed by signature
// (communicator, count, dtype), only for sum and avg, switched to compact through a vote at a call
// fixed by the stability count and the lag, identically on every rank; a violation (or a call on
// another buffer) sends every rank back to dense at the same call. Observe mode issues nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 256;

ProxyOptions tracking(uint32_t stable, uint32_t lag, config::Track mode = config::Track::kOn) {
  ProxyOptions o = test_options();
  o.track = mode;
  o.track_stable = stable;
  o.track_lag = lag;
  return o;
}

// Rank r's input: nonzero on even elements below 200 only, so the output keeps 100 of 256.
std::vector<float> input(int rank, int step) {
  std::vector<float> g(kCount, 0.0f);
  for (uint64_t i = 0; i < 200; i += 2) g[i] = float(rank + 1) + float(step) * 0.25f;
  return g;
}

struct LearnedRun {
  std::vector<std::vector<Path>> paths;                  // [rank][call]
  std::vector<std::vector<std::vector<float>>> outputs;  // [rank][call]
  Ranks ranks;
};

// A commit on every rank (learning needs the settings it compares), then `steps` calls on every
// rank; `tamper(rank, step, g)` may edit a rank's input before its call.
LearnedRun run(int nranks, ProxyOptions o, int steps,
               const std::function<void(int, int, std::vector<float>&)>& tamper = nullptr, ReduceOp op = ReduceOp::kSum,
               bool commit = true) {
  FakeWorld world(nranks);
  LearnedRun out;
  out.ranks = make_ranks(world, o);
  out.paths.assign(size_t(nranks), {});
  out.outputs.assign(size_t(nranks), {});
  run_ranks(out.ranks, [&](Rank& rank) {
    std::vector<float> g(kCount);  // the same address every call, as DDP's buckets
    if (commit) { EXPECT_EQ(rank.commit().state, CommitOutcome::State::kActivated); }
    for (int s = 0; s < steps; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      if (tamper) tamper(rank.rank, s, fresh);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path p;
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p, op), 0) << rank.backend.error;
      out.paths[size_t(rank.rank)].push_back(p);
      out.outputs[size_t(rank.rank)].push_back(g);
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
  return out;
}

TEST(LearnedTest, SwitchesToCompactThroughAVoteAtTheCallFixedByStabilityAndLag) {
  for (uint32_t lag : {1u, 2u, 4u}) {
    const uint32_t stable = 3;
    LearnedRun r = run(2, tracking(stable, lag), 12);
    // Records of calls 0..K-1 are read at calls lag..K-1+lag; the last makes the mask stable, and
    // the vote at that call lets the call itself compact.
    const size_t first_compact = stable - 1 + lag;
    for (int rank = 0; rank < 2; ++rank)
      for (size_t s = 0; s < r.paths[size_t(rank)].size(); ++s)
        EXPECT_EQ(r.paths[size_t(rank)][s], s < first_compact ? Path::kDense : Path::kCompactLearned)
            << "lag " << lag << " rank " << rank << " call " << s;
    EXPECT_EQ(r.ranks[0]->backend.last_count, 101u) << "100 kept elements and the violation flag";
    EXPECT_EQ(r.ranks[0]->backend.votes, 2) << "the commit and the learned mask";
    EXPECT_EQ(r.ranks[0]->stats.mask_violations.load(), 0u);
  }
}

TEST(LearnedTest, CompactResultsEqualDenseResults) {
  LearnedRun r = run(3, tracking(2, 2), 10);
  for (int s = 0; s < 10; ++s) {
    std::vector<float> want(kCount, 0.0f);
    for (int rank = 0; rank < 3; ++rank) {
      std::vector<float> g = input(rank, s);
      for (uint64_t i = 0; i < kCount; ++i) want[i] += g[i];
    }
    for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(r.outputs[size_t(rank)][size_t(s)], want) << rank << " " << s;
  }
}

TEST(LearnedTest, AViolationOnOneRankSendsEveryRankBackToDenseAtTheSameCall) {
  const uint32_t stable = 2, lag = 2;
  const int violating_call = 6;  // compact from call 3 on
  LearnedRun r = run(2, tracking(stable, lag), 24, [&](int rank, int step, std::vector<float>& g) {
    if (rank == 1 && step == violating_call) {
      g[201] = 5.0f;
      g[203] = -2.0f;
    }
  });
  for (size_t rank = 0; rank < 2; ++rank) {
    for (int s = 3; s < violating_call + int(lag); ++s) EXPECT_EQ(r.paths[rank][size_t(s)], Path::kCompactLearned) << s;
    // The flag of the violating call is read `lag` calls later: dense from there, relearning after
    // a back-off of 2 (stable + lag) calls (the first fallback), then `stable` observations.
    const size_t fallback = violating_call + lag, again = fallback + 2 * (stable + lag) + stable;
    EXPECT_EQ(r.paths[rank][fallback], Path::kDense) << "rank " << rank;
    EXPECT_EQ(r.paths[rank][again - 1], Path::kDense) << "rank " << rank;
    EXPECT_EQ(r.paths[rank][again], Path::kCompactLearned) << "rank " << rank;
    // What happened to the violating values: dropped (exact zero) in the compact call that had them.
    EXPECT_EQ(r.outputs[rank][violating_call][201], 0.0f);
    EXPECT_EQ(r.outputs[rank][violating_call][203], 0.0f);
  }
  EXPECT_EQ(r.ranks[1]->stats.mask_violations.load(), 2u) << "the violating rank counts its dropped values";
  EXPECT_EQ(r.ranks[0]->stats.mask_violations.load(), 0u);
}

// Review finding 3: for max, min and prod a zero output does not mean zero inputs, so such buffers
// relearned forever. They are never learned now.
TEST(LearnedTest, OnlySumAndAvgAreLearned) {
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    LearnedRun r = run(2, tracking(1, 1), 6, nullptr, op);
    for (const auto& paths : r.paths)
      for (Path p : paths) EXPECT_EQ(p, Path::kDense) << reduce_op_name(op);
    EXPECT_EQ(r.ranks[0]->backend.votes, 1) << "the commit only";
  }
  LearnedRun avg = run(2, tracking(1, 1), 4, nullptr, ReduceOp::kAvg);
  EXPECT_EQ(avg.paths[0].back(), Path::kCompactLearned);
}

// Review finding 3: learned masks keyed by address gave different histories when two logical
// tensors shared one address on one rank only. Keyed by signature, both ranks see the same calls.
TEST(LearnedTest, TwoTensorsSharingAnAddressOnOneRankOnlyLearnTheSameOnEveryRank) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(2, 1));
  const uint64_t kOther = 300;  // a second signature
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> pool(2 * kCount + 2 * kOther);
    for (int s = 0; s < 12; ++s) {
      // Rank 0's allocator gives both tensors the same address; rank 1's keeps them apart.
      float* a = pool.data();
      float* b = rank.rank == 0 ? pool.data() : pool.data() + 2 * kCount;
      std::vector<float> ga = input(rank.rank, s);
      std::copy(ga.begin(), ga.end(), a);
      ASSERT_EQ(rank.all_reduce(a, kCount), 0) << rank.backend.error;
      std::fill(b, b + kOther, 0.0f);
      for (uint64_t i = 0; i < kOther; i += 3) b[i] = 1.0f;
      Path pb;
      ASSERT_EQ(rank.all_reduce(b, kOther, &pb), 0) << rank.backend.error;
      for (uint64_t i = 0; i < kOther; ++i) ASSERT_EQ(b[i], i % 3 == 0 ? 2.0f : 0.0f);
      if (s >= 4) { EXPECT_EQ(pb, Path::kCompactLearned) << "call " << s; }
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(LearnedTest, ARefusedProposalBacksOffAndEveryRankStaysDense) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(1, 1));
  ranks[1]->backend.faults.create_layout = 1;  // rank 1 cannot build the first proposal's plan
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> g(kCount);
    std::vector<Path> paths;
    for (int s = 0; s < 12; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path p;
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
      paths.push_back(p);
    }
    EXPECT_EQ(paths[1], Path::kDense) << "the first proposal is refused everywhere";
    EXPECT_EQ(paths.back(), Path::kCompactLearned) << "a later one is adopted";
    EXPECT_EQ(rank.backend.votes, 3) << "the commit and two proposals";
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(LearnedTest, AProposalInsideAGroupIsVotedAfterTheGroup) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(1, 1));
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> g(kCount);
    std::vector<Path> paths;
    for (int s = 0; s < 5; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path p;
      ASSERT_EQ(rank.proxy.group_start(), 0);
      ASSERT_EQ(rank.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0);
      ASSERT_EQ(rank.proxy.group_end(), 0) << rank.backend.error;
      paths.push_back(p);
      std::vector<float> want(kCount, 0.0f);
      for (int r = 0; r < 2; ++r) {
        std::vector<float> in = input(r, s);
        for (uint64_t i = 0; i < kCount; ++i) want[i] += in[i];
      }
      EXPECT_EQ(g, want) << "call " << s;
    }
    // The first record is read at call 1, which proposes; the vote runs after call 1's group.
    EXPECT_EQ(paths[1], Path::kDense);
    EXPECT_EQ(paths[2], Path::kCompactLearned);
  });
}

// A captured call stayed dense while a rank issuing it eagerly compacted it. A
// learned all-reduce cannot be captured: it is refused (the communicator aborted), leaving no record.
TEST(LearnedTest, CapturedLearnedCallsAreRefusedAndLeaveNoRecord) {
  FakeWorld world(1);
  auto ranks = make_ranks(world, tracking(1, 1));
  Rank& r = *ranks[0];
  r.commit();
  std::vector<float> g = input(0, 0);
  r.backend.begin_capture();
  Path p;
  EXPECT_NE(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0);
  r.backend.end_capture();
  EXPECT_TRUE(r.proxy.aborted(kComm));
  EXPECT_EQ(r.backend.votes, 1) << "the commit's only, and no record (the fake refuses one during capture)";
  EXPECT_EQ(r.backend.error, "");
}

// Review, hang 1: SIEVE_TRACK=1 on one rank only (or SIEVE_TRACK_STABLE 3 and 4) made the tracking
// rank start a vote the others never joined. Learning starts only after a commit whose vote compared
// every such setting: a difference refuses the commit, and nobody learns.
TEST(LearnedTest, LearningSettingsThatDifferBetweenRanksRefuseTheCommitAndNothingIsLearned) {
  for (int variant = 0; variant < 4; ++variant) {
    FakeWorld world(2);
    Ranks ranks;
    for (int r = 0; r < 2; ++r) {
      ProxyOptions o = tracking(3, 1);
      if (r == 1) {
        if (variant == 0) o.track = config::Track::kOff;
        if (variant == 1) o.track_stable = 4;
        if (variant == 2) o.track_lag = 2;
        if (variant == 3) o.rules.min_count = 2;
      }
      ranks.push_back(std::make_unique<Rank>(world, r, o));
    }
    run_ranks(ranks, [&](Rank& rank) {
      EXPECT_EQ(rank.commit().state, CommitOutcome::State::kRefused) << "variant " << variant;
      std::vector<float> g(kCount);
      for (int s = 0; s < 10; ++s) {
        std::vector<float> fresh = input(rank.rank, s);
        std::copy(fresh.begin(), fresh.end(), g.begin());
        Path p;
        ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
        EXPECT_EQ(p, Path::kPassThrough);
      }
      EXPECT_EQ(rank.backend.votes, 1) << "the commit only";
    });
    EXPECT_EQ(world.mismatches(), 0u) << "variant " << variant;
  }
}

TEST(LearnedTest, NothingIsLearnedBeforeACommit) {
  LearnedRun r = run(2, tracking(1, 1), 8, nullptr, ReduceOp::kSum, /*commit=*/false);
  for (const auto& paths : r.paths)
    for (Path p : paths) EXPECT_EQ(p, Path::kPassThrough);
  EXPECT_EQ(r.ranks[0]->backend.votes, 0);
  EXPECT_EQ(r.ranks[0]->stats.learned_calls_observed.load(), 0u);
}

// Review, wrong result 7: a learned mask applied to any other tensor of its signature, silently
// (156 of 256 elements off, mask_violations=0). A learned mask is bound to the buffer it was learned
// on, on every rank: a call on another buffer raises the violation flag whatever it holds, its
// dropped values are counted, and every rank is back to dense `lag` calls later.
TEST(LearnedTest, ACallOnAnotherBufferEndsTheMaskOnEveryRankAndItsLossIsCounted) {
  const uint32_t stable = 2, lag = 1;
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(stable, lag));
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> a(kCount), b(kCount);
    Path p;
    for (int s = 0; s < 5; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), a.begin());
      ASSERT_EQ(rank.all_reduce(a.data(), kCount, &p), 0) << rank.backend.error;
    }
    EXPECT_EQ(p, Path::kCompactLearned);
    // Tensor B: the same signature, dense everywhere.
    for (uint64_t i = 0; i < kCount; ++i) b[i] = float(i + 1);
    ASSERT_EQ(rank.all_reduce(b.data(), kCount, &p), 0) << rank.backend.error;
    EXPECT_EQ(p, Path::kCompactLearned) << "decided from agreed state only: every rank compacts this call";
    const uint64_t dropped = kCount - 100;  // B's values outside the learned mask
    std::vector<float> fresh = input(rank.rank, 9);
    std::copy(fresh.begin(), fresh.end(), a.begin());
    ASSERT_EQ(rank.all_reduce(a.data(), kCount, &p), 0) << rank.backend.error;
    EXPECT_EQ(p, Path::kDense) << "the flag read `lag` calls later ends the mask on every rank";
    EXPECT_EQ(rank.stats.mask_violations.load(), dropped) << "what the call on B dropped, counted";
    EXPECT_EQ(rank.stats.learned_pattern_changes.load(), 1u);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// A group that reads one learned buffer more often than SIEVE_TRACK_LAG. Its
// records are left at the group's end, and the last dense call's record overwrote the compact call's
// flag before any call read it: a nonzero outside the mask was dropped in every step, with
// mask_violations at 0 and no fallback. The flag is now read, `lag` calls after it could be.
TEST(LearnedTest, AGroupReadingABufferMoreThanLagTimesNeverLosesAViolation) {
  const uint32_t stable = 1, lag = 2;
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(stable, lag));
  std::vector<std::vector<Path>> paths(2);
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> g(kCount);
    Path p = Path::kDense;
    for (int s = 0; s < 6 && p != Path::kCompactLearned; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
    }
    ASSERT_EQ(p, Path::kCompactLearned);
    for (int step = 0; step < 6; ++step) {
      std::vector<float> fresh = input(rank.rank, step);
      if (rank.rank == 1) fresh[201] = 3.0f;  // outside the learned mask, in every step
      std::copy(fresh.begin(), fresh.end(), g.begin());
      ASSERT_EQ(rank.proxy.group_start(), 0);
      for (uint32_t read = 0; read < lag + 1; ++read) {
        ASSERT_TRUE(enqueued(
            rank.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &p)));
        paths[size_t(rank.rank)].push_back(p);
      }
      ASSERT_EQ(rank.settle(rank.proxy.group_end()), 0) << rank.backend.error;
    }
    EXPECT_EQ(rank.stats.learned_pattern_changes.load(), 1u) << "rank " << rank.rank;
    EXPECT_EQ(paths[size_t(rank.rank)].back(), Path::kDense) << "rank " << rank.rank;
  });
  EXPECT_EQ(paths[0], paths[1]);
  EXPECT_EQ(ranks[0]->stats.mask_violations.load(), 0u);
  EXPECT_GE(ranks[1]->stats.mask_violations.load(), 1u) << "the dropped value is counted";
  // Only the compact calls up to the one that reads the flag drop anything: the violating group's
  // first call, and at most `lag` calls after that group.
  const auto first = std::find(paths[0].begin(), paths[0].end(), Path::kCompactLearned);
  ASSERT_NE(first, paths[0].end());
  EXPECT_LE(std::count(first + 1, paths[0].end(), Path::kCompactLearned), std::ptrdiff_t(lag));
  EXPECT_EQ(world.mismatches(), 0u);
}

// The same, at the signature: two compact calls whose flags are left out of order (threads taking
// turns on a communicator, one of them inside a group) land in one record slot before either is
// read. The later-written flag must not replace the unread one: both are read, the violation too.
TEST(LearnedTest, TwoUnreadFlagsInOneSlotAreBothRead) {
  FakeWorld world(1);
  FakeBackend backend(world, 0, kComm);
  CommLiveness live;
  LearnedRules rules;
  rules.stable = 1;
  rules.lag = 1;
  rules.plan.min_count = 1;
  LearnedSignature sig(kCount, DType::kF32, rules);
  std::vector<float> g = input(0, 0);
  LearnedDecision d;
  for (int call = 0; call < 2; ++call) {  // a stable pattern, proposed and agreed at the second call
    ASSERT_EQ(sig.begin_call(backend, kComm, live, g.data(), &d), 0);
    if (d.propose) {
      std::string why;
      ASSERT_TRUE(sig.prepare_proposal(backend, &why)) << why;
      sig.settle(true);
    }
    ASSERT_EQ(sig.record_dense(backend, d.record, g.data(), kStream), 0);
  }
  LearnedDecision a, b;
  ASSERT_EQ(sig.begin_call(backend, kComm, live, g.data(), &a), 0);
  ASSERT_EQ(sig.begin_call(backend, kComm, live, g.data(), &b), 0);
  ASSERT_TRUE(a.compact && b.compact);
  ASSERT_EQ(a.record, b.record);
  const std::shared_ptr<EntryPlan> plan = sig.plan();
  auto left = [&](size_t record, bool violated) {  // what the call's check and its collective left
    const FlagEncoding flag = flag_encoding(DType::kF32);
    const uint64_t bits = violated ? flag.bad_bits : flag.ok_bits, count = violated ? 1 : 0;
    std::memcpy(plan->flag(), &bits, sizeof(float));
    std::memcpy(plan->violations()->data(), &count, sizeof count);
    ASSERT_EQ(sig.record_compact(backend, record, plan, kStream), 0);
  };
  left(b.record, true);   // the later call, recorded first, found a violation
  left(a.record, false);  // the earlier call's flag, left at its group's end
  ASSERT_EQ(sig.begin_call(backend, kComm, live, g.data(), &d), 0);
  EXPECT_TRUE(d.fell_back) << "the violation was read";
  EXPECT_FALSE(d.compact);
  EXPECT_EQ(d.violations, 1u);
}

// Even a buffer whose zeros fit the mask ends it: the mask is bound to its own buffer.
TEST(LearnedTest, AnotherBufferWithTheSameZerosStillEndsTheMask) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(2, 1));
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> a(kCount), b(kCount);
    Path p;
    for (int s = 0; s < 5; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), a.begin());
      ASSERT_EQ(rank.all_reduce(a.data(), kCount, &p), 0) << rank.backend.error;
    }
    std::vector<float> same = input(rank.rank, 7);
    std::copy(same.begin(), same.end(), b.begin());
    ASSERT_EQ(rank.all_reduce(b.data(), kCount, &p), 0) << rank.backend.error;
    EXPECT_EQ(p, Path::kCompactLearned);
    std::vector<float> want(kCount, 0.0f);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> in = input(r, 7);
      for (uint64_t i = 0; i < kCount; ++i) want[i] += in[i];
    }
    EXPECT_EQ(b, want) << "nothing lost: its zeros fit";
    ASSERT_EQ(rank.all_reduce(a.data(), kCount, &p), 0) << rank.backend.error;
    EXPECT_EQ(p, Path::kDense);
    EXPECT_EQ(rank.stats.mask_violations.load(), 0u);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// A learned mask is adopted only when, on every rank, the calls it was learned from came from one
// buffer: a rank whose allocator moved the tensor inside the window votes no.
TEST(LearnedTest, APatternLearnedAcrossTwoBuffersOnOneRankIsRefused) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(2, 1));
  run_ranks(ranks, [&](Rank& rank) {
    rank.commit();
    std::vector<float> pool(2 * kCount);
    Path p;
    for (int s = 0; s < 3; ++s) {
      float* g = rank.rank == 1 && s == 1 ? pool.data() + kCount : pool.data();  // moved once, on rank 1
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g);
      ASSERT_EQ(rank.all_reduce(g, kCount, &p), 0) << rank.backend.error;
      EXPECT_EQ(p, Path::kDense) << "call " << s;
    }
    EXPECT_EQ(rank.backend.votes, 2) << "the commit, and one refused proposal";
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// SIEVE_TRACK=observe: always dense, no collective of its own, no commit needed; it counts what
// compaction would have saved and how often the pattern changed. Settings may differ between ranks.
TEST(LearnedTest, ObserveModeChangesNoCollectiveAndCountsWhatItWouldSave) {
  FakeWorld world(2);
  Ranks ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(
        std::make_unique<Rank>(world, r, r == 0 ? tracking(2, 1, config::Track::kObserve) : test_options()));
  run_ranks(ranks, [&](Rank& rank) {
    std::vector<float> g(kCount);
    for (int s = 0; s < 10; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      if (s == 6) fresh[201] = 1.0f;  // the pattern changes once
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path p;
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
      EXPECT_NE(p, Path::kCompactLearned);
      EXPECT_EQ(rank.backend.last_count, kCount);
    }
    EXPECT_EQ(rank.backend.votes, 0);
  });
  EXPECT_EQ(world.mismatches(), 0u);
  const ProcessStats& st = ranks[0]->stats;
  EXPECT_EQ(st.learned_calls_observed.load(), 10u);
  EXPECT_EQ(st.learned_pattern_changes.load(), 1u);
  // Records of calls 1..5 (read at 2..6) and 8 (read at 9) fit a stable mask: 100 kept + the flag.
  EXPECT_EQ(st.learned_bytes_saved.load(), 6u * (kCount - 101) * 4);
  EXPECT_EQ(ranks[1]->stats.learned_calls_observed.load(), 0u);
}

// A buffer whose pattern flips every 4 calls cost a vote and dropped values in
// every cycle, forever (15 votes and 7,500 values in 120 calls with the defaults). Fallbacks back off
// exponentially, like refusals, and the fourth retires the signature: dense, logged and counted once.
TEST(LearnedTest, APatternThatKeepsFlippingBacksOffAndIsRetired) {
  for (uint32_t stable : {1u, 3u}) {
    const uint32_t lag = stable == 1 ? 1 : 2;
    LogCapture log;
    LearnedRun r = run(2, tracking(stable, lag), 240, [](int, int step, std::vector<float>& g) {
      if ((step / 4) % 2 == 1) std::rotate(g.begin(), g.begin() + 1, g.end());  // odd elements instead
    });
    for (int rank = 0; rank < 2; ++rank) {
      const Rank& k = *r.ranks[size_t(rank)];
      EXPECT_EQ(r.paths[size_t(rank)], r.paths[0]) << "every rank runs the same path at every call";
      EXPECT_LE(k.backend.votes, 1 + int(LearnedSignature::kMaxFallbacks)) << "stable " << stable;
      EXPECT_EQ(k.stats.learned_signatures_retired.load(), 1u) << "stable " << stable;
      EXPECT_LE(k.stats.mask_violations.load(), uint64_t(LearnedSignature::kMaxFallbacks) * lag * 100);
    }
    // Retired: the last calls are dense, and nothing more is recorded or voted.
    for (size_t s = 200; s < 240; ++s) EXPECT_EQ(r.paths[0][s], Path::kDense) << s;
    EXPECT_EQ(log.count("no longer learned"), 2u) << "once per rank";
    // Every output is the dense sum wherever the learned mask held; after retirement, always.
    for (int s = 200; s < 240; ++s) {
      std::vector<float> want(kCount, 0.0f);
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<float> in = input(rank, s);
        if ((s / 4) % 2 == 1) std::rotate(in.begin(), in.begin() + 1, in.end());
        for (uint64_t i = 0; i < kCount; ++i) want[i] += in[i];
      }
      EXPECT_EQ(r.outputs[0][size_t(s)], want) << s;
    }
  }
}

// A refused commit dropped every learned signature, retired ones too, so the
// next agreed commit learned a retired signature again (and dropped its values again). Retirement
// outlives a refused commit; what was learned but not retired is relearned, as before.
TEST(LearnedTest, ARefusedCommitLeavesARetiredSignatureRetired) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(1, 1));
  run_ranks(ranks, [&](Rank& rank) {
    ASSERT_EQ(rank.commit().state, CommitOutcome::State::kActivated);
    std::vector<float> g(kCount);
    Path p;
    for (int s = 0; s < 240; ++s) {  // a pattern that flips every 4 calls: retired well before the end
      std::vector<float> fresh = input(rank.rank, s);
      if ((s / 4) % 2 == 1) std::rotate(fresh.begin(), fresh.begin() + 1, fresh.end());
      std::copy(fresh.begin(), fresh.end(), g.begin());
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
    }
    ASSERT_EQ(rank.stats.learned_signatures_retired.load(), 1u);
    // Rank 1 publishes a mask rank 0 does not: refused on both. Then both agree again.
    std::vector<float> other(kCount);
    if (rank.rank == 1) rank.publish(other.data(), compress::Mask(kCount, true));
    EXPECT_EQ(rank.commit().state, CommitOutcome::State::kRefused);
    if (rank.rank == 1) { ASSERT_TRUE(rank.registry.retract(other.data()).ok()); }
    ASSERT_EQ(rank.commit().state, CommitOutcome::State::kActivated);
    const int votes = rank.backend.votes;
    for (int s = 0; s < 20; ++s) {  // a pattern that would be learned at once
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      ASSERT_EQ(rank.all_reduce(g.data(), kCount, &p), 0) << rank.backend.error;
      EXPECT_EQ(p, Path::kDense) << "call " << s;
    }
    EXPECT_EQ(rank.backend.votes, votes) << "a retired signature is never proposed again";
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(FlagEncodingTest, TheReducedFlagReportsAnyViolatingRankForSumAndAvg) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const FlagEncoding e = flag_encoding(type);
    EXPECT_FALSE(flag_reports_violation(type, e.ok_bits)) << dtype_name(type);
    EXPECT_TRUE(flag_reports_violation(type, e.bad_bits)) << dtype_name(type);
    // -0.0 (a sum of zeros can come out negative) is no violation.
    EXPECT_FALSE(flag_reports_violation(type, 1ull << (compress::dtype_size(type) * 8 - 1))) << dtype_name(type);
  }
}

// One element-type enum for the registry and the proxy (compress::DType): its integer types are
// never compacted (a flag, a mask or a zero means nothing there), only the floating ones are.
TEST(ElementTypes, OnlyTheFloatingTypesCompact) {
  for (int t = 0; t < compress::kDTypeCount; ++t) {
    const DType type = DType(t);
    const bool floating = type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 || type == DType::kF64;
    EXPECT_EQ(compactable(type), floating) << dtype_name(type);
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
