// SPDX-License-Identifier: Apache-2.0
// Reduce-scatter and all-gather (FSDP) and union masks (PruneX's OR-merge) on the CPU: outputs
// equal the dense ones exactly, for every communicator size from 2 to 8.
#include <gtest/gtest.h>

#include "plugin/sieve.h"
#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

// Unbalanced on purpose: shard 0 keeps far more than the others, so padding to K matters.
compress::Mask skewed_mask(uint64_t count) {
  compress::Mask m(count, false);
  for (uint64_t i = 0; i < count; i += 5) m.set_range(i, 1, true);
  m.set_range(0, count / 16, true);
  return m;
}

float value(int rank, uint64_t i, int step) { return float(rank + 1) * 0.5f + float(i % 13) + float(step); }

TEST(CollectivesTest, ReduceScatterCompactsEachShardPaddedToTheLargestOne) {
  for (int n = 2; n <= 8; ++n) {
    const uint64_t shard = 240, count = shard * uint64_t(n);
    compress::Mask m = skewed_mask(count);
    FakeWorld world(n);
    auto ranks = make_ranks(world);
    run_ranks(ranks, [&](Rank& r) {
      std::vector<float> send(count), recv(shard, 9.0f);
      r.publish(send.data(), m);
      r.commit();
      for (int step = 0; step < 2; ++step) {
        for (uint64_t i = 0; i < count; ++i) send[i] = m.test(i) ? value(r.rank, i, step) : 0.0f;
        Path path;
        ASSERT_EQ(r.settle(r.proxy.reduce_scatter(send.data(), recv.data(), shard, DType::kF32, ReduceOp::kSum, kComm,
                                                  kStream, &path)),
                  0)
            << r.backend.error;
        EXPECT_EQ(path, Path::kCompactPublished) << n << " ranks";
        for (uint64_t j = 0; j < shard; ++j) {
          const uint64_t i = uint64_t(r.rank) * shard + j;
          float want = 0.0f;
          for (int q = 0; q < n; ++q) want += m.test(i) ? value(q, i, step) : 0.0f;
          ASSERT_EQ(recv[j], want) << n << " ranks, rank " << r.rank << " element " << j;
        }
      }
      // Every rank sends n * K elements, K the largest shard's kept count.
      uint64_t width = 0;
      for (int s = 0; s < n; ++s) {
        uint64_t kept = 0;
        for (uint64_t j = 0; j < shard; ++j) kept += m.test(uint64_t(s) * shard + j);
        width = std::max(width, kept);
      }
      EXPECT_EQ(r.backend.last_count, width);
    });
    EXPECT_EQ(world.mismatches(), 0u);
  }
}

TEST(CollectivesTest, AllGatherCompactsWithTheMaskOfTheGatheredBuffer) {
  for (int n = 2; n <= 8; ++n) {
    const uint64_t shard = 240, count = shard * uint64_t(n);
    compress::Mask m = skewed_mask(count);
    FakeWorld world(n);
    auto ranks = make_ranks(world);
    run_ranks(ranks, [&](Rank& r) {
      std::vector<float> full(count, 9.0f);  // the unsharded parameter: its mask is published
      r.publish(full.data(), m);
      r.commit();
      // In place, as FSDP does: this rank's shard lives inside the output.
      float* mine = full.data() + uint64_t(r.rank) * shard;
      for (uint64_t j = 0; j < shard; ++j) {
        const uint64_t i = uint64_t(r.rank) * shard + j;
        mine[j] = m.test(i) ? value(r.rank, i, 0) : 0.0f;
      }
      Path path;
      ASSERT_EQ(r.settle(r.proxy.all_gather(mine, full.data(), shard, DType::kF32, kComm, kStream, &path)), 0)
          << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      for (uint64_t i = 0; i < count; ++i)
        ASSERT_EQ(full[i], m.test(i) ? value(int(i / shard), i, 0) : 0.0f) << n << " ranks, element " << i;
    });
    EXPECT_EQ(world.mismatches(), 0u);
  }
}

TEST(CollectivesTest, ShardsThatDoNotDivideOrDoNotPayRunDense) {
  FakeWorld world(3);
  auto ranks = make_ranks(world);
  run_ranks(ranks, [&](Rank& r) {
    // 3 ranks, and all kept elements in one shard: n * K = count, nothing to gain.
    compress::Mask lopsided(300, false);
    lopsided.set_range(0, 100, true);
    std::vector<float> send(300, 0.0f), recv(100);
    for (uint64_t i = 0; i < 100; ++i) send[i] = 1.0f;
    r.publish(send.data(), lopsided);
    r.commit();
    Path path;
    ASSERT_EQ(r.settle(r.proxy.reduce_scatter(send.data(), recv.data(), 100, DType::kF32, ReduceOp::kSum, kComm,
                                              kStream, &path)),
              0)
        << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    for (float v : recv) ASSERT_EQ(v, r.rank == 0 ? 3.0f : 0.0f);
  });
}

TEST(CollectivesTest, UnionMasksLetRanksPublishDifferentMasksAndStayExact) {
  for (int n = 2; n <= 8; n += 3) {
    const uint64_t count = 1200;
    FakeWorld world(n);
    auto ranks = make_ranks(world);
    // Rank r keeps every 7th element plus its own block: the union keeps every block.
    auto mask_of = [&](int r) {
      compress::Mask m(count, false);
      for (uint64_t i = 0; i < count; i += 7) m.set_range(i, 1, true);
      m.set_range(uint64_t(r) * 40, 40, true);
      return m;
    };
    compress::Mask merged(count, false);
    for (int r = 0; r < n; ++r) {
      compress::Mask both;
      ASSERT_TRUE(compress::Mask::merge_or(merged, mask_of(r), &both).ok());
      merged = both;
    }
    run_ranks(ranks, [&](Rank& r) {
      compress::Mask mine = mask_of(r.rank);
      std::vector<float> g(count);
      for (uint64_t i = 0; i < count; ++i) g[i] = mine.test(i) ? value(r.rank, i, 0) : 0.0f;
      r.publish(g.data(), mine);
      r.commit(SIEVE_COMMIT_UNION);
      Path path;
      ASSERT_EQ(r.all_reduce(g.data(), count, &path), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      EXPECT_EQ(r.backend.last_count, merged.kept()) << "every rank compacts on the union";
      for (uint64_t i = 0; i < count; ++i) {
        float want = 0.0f;
        for (int q = 0; q < n; ++q) want += mask_of(q).test(i) ? value(q, i, 0) : 0.0f;
        ASSERT_EQ(g[i], want) << "element " << i;
      }
    });
    EXPECT_EQ(world.mismatches(), 0u);
  }
}

TEST(CollectivesTest, UnionNeedsTheSameBuffersOnEveryRank) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g(1000, 1.0f);
    r.publish(g.data(), compress::Mask(r.rank == 0 ? 1000 : 999, true));  // different counts
    r.commit(SIEVE_COMMIT_UNION);
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), 1000, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kPassThrough);
    EXPECT_EQ(r.stats.tables_refused.load(), 1u);
    EXPECT_EQ(r.backend.votes, 1) << "no merge after a refused structure vote";
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// A union commit of collective masks (publish_fsdp(union=True)). Whether a shape
// names its mask for certain was decided from each rank's own masks, which a union lets differ: a
// rank whose own two masks of a shape were equal compacted a reduce-scatter that a rank whose own
// differed ran dense (under NCCL, a hang). It is decided from the OR'ed masks every rank agreed on.
TEST(CollectivesTest, AUnionDecidesWhetherAShapeNamesItsMaskFromTheMergedMasks) {
  const uint64_t count = 1200;
  compress::Mask x(count, false);
  for (uint64_t i = 0; i < count; i += 3) x.set_range(i, 1, true);
  for (const bool merged_equal : {true, false}) {
    FakeWorld world(2);
    auto ranks = make_ranks(world);
    // Rank 0 publishes x twice. Rank 1's two masks differ: inside x (the unions are both x, so the
    // shape names x for certain), or each beyond x in its own place (the unions differ: dense).
    auto masks_of = [&](int rank) {
      compress::Mask a = x, b = x;
      if (rank == 1 && merged_equal) a.set_range(0, 30, false), b.set_range(600, 30, false);
      if (rank == 1 && !merged_equal) a.set_range(1, 1, true), b.set_range(2, 1, true);
      return std::make_pair(a, b);
    };
    std::vector<Path> paths(2);
    run_ranks(ranks, [&](Rank& r) {
      const auto [a, b] = masks_of(r.rank);
      for (const compress::Mask* m : {&a, &b})
        ASSERT_TRUE(r.registry
                        .publish_collective(compress::Collective::kReduceScatter, compress::DType::kF32,
                                            std::make_shared<const compress::Mask>(*m), nullptr)
                        .ok());
      ASSERT_EQ(r.commit(SIEVE_COMMIT_UNION).state, CommitOutcome::State::kActivated);
      std::vector<float> send(count, 0.0f), recv(count / 2);
      for (uint64_t i = 0; i < count; ++i)  // zero wherever either mask of either rank prunes
        if (a.test(i) && b.test(i) && x.test(i) && i >= 30 && (i < 600 || i >= 630)) send[i] = value(r.rank, i, 0);
      ASSERT_EQ(r.settle(r.proxy.reduce_scatter(send.data(), recv.data(), count / 2, DType::kF32, ReduceOp::kSum, kComm,
                                                kStream, &paths[size_t(r.rank)])),
                0)
          << r.backend.error;
      for (uint64_t i = 0; i < count / 2; ++i) {
        const uint64_t at = uint64_t(r.rank) * (count / 2) + i;
        const bool sent = x.test(at) && at >= 30 && (at < 600 || at >= 630);
        ASSERT_EQ(recv[i], sent ? value(0, at, 0) + value(1, at, 0) : 0.0f) << "element " << at;
      }
    });
    EXPECT_EQ(world.mismatches(), 0u) << (merged_equal ? "equal unions" : "different unions");
    EXPECT_EQ(paths[0], merged_equal ? Path::kCompactPublished : Path::kDense);
    EXPECT_EQ(paths[1], paths[0]);
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
