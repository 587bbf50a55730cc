// SPDX-License-Identifier: Apache-2.0
// CUDA graph capture: a rank that captures what another issues eagerly (NCCL allows it)
// with SIEVE_PROXY_VERIFY=1 or learned masks, captured plans across many commits, and captured
// groups, whose collectives NCCL captures at the group's end (the fake models that).
#include <gtest/gtest.h>

#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 1000;

// Rank 0 captures the compacted all-reduce and replays it; rank 1 issues it eagerly. Both must issue
// the same collectives: with VERIFY, the dense twin and the compacted one.
TEST(CaptureTest, CaptureOnOneRankOnlyIssuesTheSameCollectivesWithVerify) {
  ProxyOptions o = test_options();
  o.verify = true;
  FakeWorld world(2);
  auto ranks = make_ranks(world, o);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    Path path;
    if (r.rank == 0) {
      r.backend.begin_capture();
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
      r.backend.end_capture();
      ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
    } else {
      ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    }
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(g, dense_sum(m, 2));
  });
  EXPECT_EQ(world.mismatches(), 0u) << "one rank ran the dense twin, the other did not";
  EXPECT_EQ(ranks[0]->backend.log, ranks[1]->backend.log);
}

// Learned masks read records on the host and vote: no captured call can match what an eager rank
// does, so whichever rank captures a learned all-reduce refuses it by aborting the communicator: a
// loud error on every rank, never a dense call against a compacted one.
TEST(CaptureTest, CaptureOfALearnedAllReduceIsRefusedOnWhicheverRankCapturesIt) {
  ProxyOptions o = test_options();
  o.track = config::Track::kOn;
  o.track_stable = 1;
  o.track_lag = 1;
  constexpr uint64_t n = 256;
  FakeWorld world(2);
  auto ranks = make_ranks(world, o);
  LogCapture log;
  run_ranks(ranks, [&](Rank& r) {
    ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    std::vector<float> g(n);
    Path path = Path::kDense;
    for (int s = 0; s < 4; ++s) {  // learned and compacting by the third call
      std::fill(g.begin(), g.end(), 0.0f);
      for (uint64_t i = 0; i < 100; ++i) g[i] = float(r.rank + 1);
      ASSERT_EQ(r.all_reduce(g.data(), n, &path), 0) << r.backend.error;
    }
    EXPECT_EQ(path, Path::kCompactLearned);
    if (r.rank == 0) {
      r.backend.begin_capture();
      EXPECT_NE(r.proxy.all_reduce(g.data(), g.data(), n, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
      r.backend.end_capture();
      EXPECT_EQ(r.backend.replay(), 0);
      EXPECT_TRUE(r.proxy.aborted(kComm));
    } else {
      EXPECT_NE(r.all_reduce(g.data(), n, &path), 0) << "the capturing rank aborted the communicator";
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
  EXPECT_TRUE(world.aborted());
  EXPECT_EQ(log.count("was captured into a CUDA graph"), 1u);
}

// Where no graph can hold what it captured, a plan a graph captured stays in every later table (the
// same mask, reused): it is kept for the graph's replays once, not once per commit.
TEST(CaptureTest, CapturedPlansDoNotPileUpAcrossCommits) {
  FakeWorld world(1);
  auto ranks = make_ranks(world);
  Rank& r = *ranks[0];
  r.backend.graphs_keep = false;  // no graph holds what it captured: the communicator keeps it
  compress::Mask m = thirds_mask(kCount);
  std::vector<float> g = gradient(m, 0);
  r.publish(g.data(), m);
  r.commit();
  r.backend.begin_capture();
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  r.backend.end_capture();
  for (int i = 0; i < 200; ++i) ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
  EXPECT_LE(r.proxy.graph_plans(kComm), 1u);
  std::vector<float> f = gradient(m, 0, 3);
  std::copy(f.begin(), f.end(), g.begin());
  ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
  expect_exact(g, dense_sum(m, 1, 3));
}

// Re-pruning and re-capturing (a new mask, a commit and a new graph each round)
// kept every old plan and its device memory for the process's life: 20 rounds, 19 plans. A graph now
// holds what its replays use, as the table holds what eager calls use: an old graph still replays
// its own mask after a commit replaced it, and destroying the graph frees what nothing else uses.
TEST(CaptureTest, RepruningAndRecapturingKeepOnlyWhatLiveGraphsUse) {
  for (const bool verify : {false, true}) {
    ProxyOptions o = test_options();
    o.verify = verify;
    FakeWorld world(1);
    auto ranks = make_ranks(world, o);
    Rank& r = *ranks[0];
    std::vector<float> g(kCount);
    const int buffers = FakeBuffer::live, layouts = FakeLayout::live();
    int round_buffers = 0, round_layouts = 0;
    compress::Mask last;
    for (int round = 0; round < 20; ++round) {
      compress::Mask m = thirds_mask(kCount);
      m.set_range(0, uint64_t(round) + 1, false);  // each round prunes one more element
      r.publish(g.data(), m);
      ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
      if (round > 0) {  // the last round's graph, its plan replaced by the commit, still replays it
        std::vector<float> f = gradient(last, 0, round);
        std::copy(f.begin(), f.end(), g.begin());
        ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
        expect_exact(g, dense_sum(last, 1, round));
      }
      r.backend.begin_capture();  // the trainer's new graph replaces the last one
      Path path;
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
      r.backend.end_capture();
      EXPECT_EQ(path, Path::kCompactPublished);
      std::vector<float> f = gradient(m, 0, round);
      std::copy(f.begin(), f.end(), g.begin());
      ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
      expect_exact(g, dense_sum(m, 1, round));
      if (round == 0) round_buffers = FakeBuffer::live - buffers, round_layouts = FakeLayout::live() - layouts;
      last = m;
    }
    EXPECT_EQ(r.proxy.graph_plans(kComm), 0u);
    EXPECT_EQ(FakeBuffer::live - buffers, round_buffers) << "one plan: the table's, which the graph uses";
    EXPECT_EQ(FakeLayout::live() - layouts, round_layouts);
    // The communicator is torn down; the graph still holds what its replays use.
    EXPECT_FALSE(r.proxy.release(kComm, nullptr));
    r.proxy.forget(kComm);
    ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
    r.backend.destroy_graph();
    EXPECT_EQ(FakeBuffer::live, buffers) << "verify " << verify;
    EXPECT_EQ(FakeLayout::live(), layouts);
  }
}

// Two compacted all-reduces captured in one group: on replay each gather must read the buffer as it
// is then, before the group's collectives run, and each scatter come after them.
TEST(CaptureTest, ACapturedGroupReplaysItsGathersCollectivesAndScattersInOrder) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount), m2 = thirds_mask(kCount);
  m2.set_range(0, 60, false);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> a = gradient(m, r.rank), b = gradient(m2, r.rank);
    r.publish(a.data(), m);
    r.publish(b.data(), m2);
    ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    r.backend.begin_capture();
    Path pa, pb;
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &pa), 0);
    ASSERT_EQ(r.proxy.all_reduce(b.data(), b.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &pb), 0);
    ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
    r.backend.end_capture();
    EXPECT_EQ(pa, Path::kCompactPublished);
    EXPECT_EQ(pb, Path::kCompactPublished);
    for (int replay = 1; replay <= 2; ++replay) {
      std::vector<float> fa = gradient(m, r.rank, replay), fb = gradient(m2, r.rank, replay);
      std::copy(fa.begin(), fa.end(), a.begin());
      std::copy(fb.begin(), fb.end(), b.begin());
      ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
      expect_exact(a, dense_sum(m, 2, replay));
      expect_exact(b, dense_sum(m2, 2, replay));
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

}  // namespace
}  // namespace sieve::plugin::proxy
