// SPDX-License-Identifier: Apache-2.0
// A published mask that prunes a nonzero value. The result stays the trusted one
// (the mask's: the value is dropped), but each rank counts such values on the device, per
// communicator (`mask_violations`), and warns once.
#include <gtest/gtest.h>

#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 1000;
Comm const kOther = reinterpret_cast<Comm>(0x3000);

TEST(ViolationTest, APublishedMaskThatPrunesNonzerosIsCountedPerCommunicatorAndWarnedOnce) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  LogCapture log;
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g(kCount);
    r.publish(g.data(), m);
    ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> fresh = gradient(m, r.rank, step);
      if (r.rank == 1) fresh[1] = fresh[2] = 4.0f;  // two values the mask prunes
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path path;
      ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      expect_exact(g, dense_sum(m, 2, step));  // the trusted result: the pruned values dropped
    }
  });
  EXPECT_EQ(ranks[1]->proxy.mask_violations(kComm), 6u);
  EXPECT_EQ(ranks[1]->stats.mask_violations.load(), 6u);
  EXPECT_EQ(ranks[0]->proxy.mask_violations(kComm), 0u);
  EXPECT_EQ(ranks[0]->stats.mask_violations.load(), 0u);
  EXPECT_EQ(log.count("pruned 2 nonzero values"), 1u) << "once, by the rank that had them";
  EXPECT_NE(ranks[1]->proxy.describe_state("test").find("6 nonzero values its published masks pruned"),
            std::string::npos);
}

// A dishonest mask inside a CUDA-graph loop was silent. Replays count on the
// device, but the host added the count only at an eager call, which a graph loop never makes. What
// replays counted reaches mask_violations where the host waits anyway (the communicator's next
// commit) and at its teardown.
TEST(ViolationTest, ReplaysOfACapturedCollectiveCountWhatItsMaskPrunes) {
  FakeWorld world(1);
  auto ranks = make_ranks(world);
  Rank& r = *ranks[0];
  compress::Mask m = thirds_mask(kCount);
  std::vector<float> g(kCount);
  r.publish(g.data(), m);
  ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
  LogCapture log;
  r.backend.begin_capture();
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  r.backend.end_capture();
  auto replay = [&](int times) {
    for (int step = 0; step < times; ++step) {
      std::vector<float> fresh = gradient(m, 0, step);
      fresh[1] = fresh[2] = 4.0f;  // two values the mask prunes
      std::copy(fresh.begin(), fresh.end(), g.begin());
      ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
      expect_exact(g, dense_sum(m, 1, step));  // the trusted result: dropped
    }
  };
  replay(3);
  ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);  // the same table, the same plan
  EXPECT_EQ(r.proxy.mask_violations(kComm), 6u);
  EXPECT_EQ(r.stats.mask_violations.load(), 6u);
  EXPECT_EQ(log.count("pruned 6 nonzero values"), 1u);
  replay(2);
  EXPECT_FALSE(r.proxy.release(kComm, nullptr));  // ncclCommDestroy
  r.proxy.forget(kComm);
  EXPECT_EQ(r.stats.mask_violations.load(), 10u) << "the teardown takes in the rest";
  EXPECT_EQ(log.count("nonzero values; they were dropped"), 1u) << "warned once";
}

TEST(ViolationTest, ShardedCollectivesCountTheirShardsAndOtherCommunicatorsStayClean) {
  FakeWorld world(2), other(2);
  auto ranks = make_ranks(world);
  for (auto& r : ranks) r->backend.join(kOther, other, r->rank);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> whole = gradient(m, r.rank), shard(kCount / 2), plain = gradient(m, r.rank);
    whole[1] = 3.0f;  // pruned, in rank 0's shard of the reduce-scatter's input
    r.publish(whole.data(), m);
    r.commit();
    r.commit(0, kOther);
    Path path;
    ASSERT_EQ(r.settle(r.proxy.reduce_scatter(whole.data(), shard.data(), kCount / 2, DType::kF32, ReduceOp::kSum,
                                              kComm, kStream, &path)),
              0)
        << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    ASSERT_EQ(r.all_reduce(plain.data(), kCount, &path, ReduceOp::kSum, DType::kF32, kOther), 0) << r.backend.error;
  });
  for (auto& r : ranks) {
    EXPECT_EQ(r->proxy.mask_violations(kComm), 1u) << "every rank gathers every shard of its own input";
    EXPECT_EQ(r->proxy.mask_violations(kOther), 0u);
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
