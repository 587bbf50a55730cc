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
