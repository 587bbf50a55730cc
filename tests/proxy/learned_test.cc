// Learned masks (SIEVE_TRACK=1) on the CPU: keyed by signature (communicator, count, dtype), only for
// sum and avg, switched to compact through a vote at a call fixed by the stability count and the lag,
// identically on every rank; a violation sends every rank back to dense at the same call.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 256;

ProxyOptions tracking(uint32_t stable, uint32_t lag) {
  ProxyOptions o = test_options();
  o.track = true;
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

// `steps` calls on every rank; `tamper(rank, step, g)` may edit a rank's input before its call.
LearnedRun run(int nranks, ProxyOptions o, int steps, const std::function<void(int, int, std::vector<float>&)>& tamper = nullptr,
        ReduceOp op = ReduceOp::kSum) {
  FakeWorld world(nranks);
  LearnedRun out;
  out.ranks = make_ranks(world, o);
  out.paths.assign(size_t(nranks), {});
  out.outputs.assign(size_t(nranks), {});
  run_ranks(out.ranks, [&](Rank& rank) {
    std::vector<float> g(kCount);  // the same address every call, as DDP's buckets
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
    EXPECT_EQ(r.ranks[0]->backend.votes, 1);
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
  LearnedRun r = run(2, tracking(stable, lag), 16, [&](int rank, int step, std::vector<float>& g) {
    if (rank == 1 && step == violating_call) {
      g[201] = 5.0f;
      g[203] = -2.0f;
    }
  });
  for (size_t rank = 0; rank < 2; ++rank) {
    for (int s = 3; s < violating_call + int(lag); ++s) EXPECT_EQ(r.paths[rank][size_t(s)], Path::kCompactLearned) << s;
    // The flag of the violating call is read `lag` calls later: dense from there, relearning.
    EXPECT_EQ(r.paths[rank][violating_call + lag], Path::kDense) << "rank " << rank;
    EXPECT_EQ(r.paths[rank][violating_call + lag + stable - 1 + lag], Path::kCompactLearned) << "rank " << rank;
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
    EXPECT_EQ(r.ranks[0]->backend.votes, 0);
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
      if (s >= 4) {
        EXPECT_EQ(pb, Path::kCompactLearned) << "call " << s;
      }
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(LearnedTest, ARefusedProposalBacksOffAndEveryRankStaysDense) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(1, 1));
  ranks[1]->backend.faults.create_layout = 1;  // rank 1 cannot build the first proposal's plan
  run_ranks(ranks, [&](Rank& rank) {
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
    EXPECT_EQ(rank.backend.votes, 2);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(LearnedTest, AProposalInsideAGroupIsVotedAfterTheGroup) {
  FakeWorld world(2);
  auto ranks = make_ranks(world, tracking(1, 1));
  run_ranks(ranks, [&](Rank& rank) {
    std::vector<float> g(kCount);
    std::vector<Path> paths;
    for (int s = 0; s < 5; ++s) {
      std::vector<float> fresh = input(rank.rank, s);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path p;
      ASSERT_EQ(rank.proxy.group_start(), 0);
      ASSERT_EQ(rank.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0);
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

TEST(LearnedTest, CapturedCallsStayDenseAndLeaveNoRecord) {
  FakeWorld world(1);
  auto ranks = make_ranks(world, tracking(1, 1));
  Rank& r = *ranks[0];
  std::vector<float> g = input(0, 0);
  r.backend.begin_capture();
  Path p;
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0)
        << r.backend.error;
  r.backend.end_capture();
  EXPECT_EQ(p, Path::kDense);
  EXPECT_EQ(r.backend.votes, 0) << "no vote, and no record (the fake refuses one during capture)";
}

TEST(FlagEncodingTest, TheReducedFlagReportsAnyViolatingRankForSumAndAvg) {
  for (ElemType type : {ElemType::kF32, ElemType::kF16, ElemType::kBF16, ElemType::kF64}) {
    const FlagEncoding e = flag_encoding(type);
    EXPECT_FALSE(flag_reports_violation(type, e.ok_bits)) << elem_type_name(type);
    EXPECT_TRUE(flag_reports_violation(type, e.bad_bits)) << elem_type_name(type);
    // -0.0 (a sum of zeros can come out negative) is no violation.
    EXPECT_FALSE(flag_reports_violation(type, 1ull << (element_size(type) * 8 - 1))) << elem_type_name(type);
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
