// The proxy's published-mask path on the CPU: commit, vote, activation, exact compaction, and each
// way a review found that the old proxy could make ranks diverge, as a named regression test. Ranks
// are threads over a FakeWorld whose collectives fail (instead of hanging) when ranks disagree.
#include <gtest/gtest.h>

#include "tests/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 1000;

TEST(ProxyTest, NothingCommittedPassesThroughWithoutAVote) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);  // published but never committed: nothing changes
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kPassThrough);
    EXPECT_EQ(r.backend.votes, 0);
    EXPECT_EQ(r.backend.last_count, kCount);
    expect_exact(g, dense_sum(m, 2));
  });
}

TEST(ProxyTest, ACommittedMaskCompactsExactlyAfterOneVote) {
  FakeWorld world(3);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    for (int step = 0; step < 3; ++step) {
      std::vector<float> fresh = gradient(m, r.rank, step);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path path;
      ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      EXPECT_EQ(r.backend.last_count, m.kept());
      expect_exact(g, dense_sum(m, 3, step));
    }
    EXPECT_EQ(r.backend.votes, 1) << "one vote per commit and communicator";
    EXPECT_EQ(r.stats.tables_activated.load(), 1u);
    EXPECT_EQ(r.stats.collectives_compacted.load(), 3u);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, EveryOpAgreesWithDenseInF64) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    FakeWorld world(2);
    auto ranks = make_ranks(world);
    compress::Mask m = thirds_mask(kCount);
    run_ranks(ranks, [&](Rank& r) {
      std::vector<double> g(kCount), want(kCount);
      for (uint64_t i = 0; i < kCount; ++i) {
        const double a = m.test(i) ? 2.0 + double(i % 5) : 0.0, b = m.test(i) ? -1.5 + double(i % 5) : 0.0;
        g[i] = r.rank ? b : a;
        switch (op) {
          case ReduceOp::kSum: want[i] = a + b; break;
          case ReduceOp::kProd: want[i] = a * b; break;
          case ReduceOp::kMax: want[i] = std::max(a, b); break;
          case ReduceOp::kMin: want[i] = std::min(a, b); break;
          default: want[i] = (a + b) / 2; break;
        }
      }
      r.publish(g.data(), m, compress::DType::kF64);
      r.commit();
      Path path;
      ASSERT_EQ(r.all_reduce(g.data(), kCount, &path, op, ElemType::kF64), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(g[i], want[i]) << reduce_op_name(op) << " element " << i;
    });
  }
}

TEST(ProxyTest, ACollectiveMustMatchTheEntryExactly) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    Path path;
    // A shorter count, another dtype, or a base inside the entry: all dense.
    ASSERT_EQ(r.all_reduce(g.data(), kCount - 1, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    ASSERT_EQ(r.all_reduce(g.data() + 1, kCount - 1, &path), 0);
    EXPECT_EQ(path, Path::kDense);
    ASSERT_EQ(r.settle(r.proxy.all_reduce(g.data(), g.data(), kCount / 2, ElemType::kF64, ReduceOp::kSum, kComm,
                                          kStream, &path)), 0);
    EXPECT_EQ(path, Path::kDense);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Review finding 1: an address new on one rank and reused on another (allocator history) decided
// whether the hash exchange ran. Now a freed tensor's mask is retired at once (the Python binding
// retracts it by id when the tensor dies) and a new buffer at the old address matches nothing.
TEST(ProxyTest, AnAddressReusedOnOneRankOnlyCannotMakeRanksDiverge) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> pool(3 * kCount);
    float* a = pool.data();
    std::vector<float> g = gradient(m, r.rank);
    std::copy(g.begin(), g.end(), a);
    const uint64_t id = r.publish(a, m);
    r.commit();
    ASSERT_EQ(r.all_reduce(a, kCount), 0) << r.backend.error;
    ASSERT_TRUE(r.registry.retract_id(id).ok());  // tensor A freed
    // Tensor B, unpublished and dense: rank 0's allocator hands it A's address, rank 1's a new one.
    float* b = r.rank == 0 ? a : pool.data() + kCount;
    std::fill(b, b + kCount, float(r.rank + 1));
    Path path;
    ASSERT_EQ(r.all_reduce(b, kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(b[i], 3.0f) << "nothing of B may be zeroed";
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Review finding 1: a rank that published nothing took a fast path and skipped the exchange.
TEST(ProxyTest, ARankThatPublishedNothingStillVotesAndEveryRankStaysDense) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    if (r.rank == 0) r.publish(g.data(), m);
    r.commit();
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    EXPECT_EQ(r.backend.votes, 1);
    EXPECT_EQ(r.stats.tables_refused.load(), 1u);
    expect_exact(g, dense_sum(m, 2));
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Review finding 1: republishing an unchanged mask short-circuited the exchange while a peer's
// mask had changed.
TEST(ProxyTest, RepublishingAnUnchangedMaskWhileAPeerChangesItsOwnRefusesTheTable) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount), m2 = thirds_mask(kCount);
  m2.set_range(0, 100, true);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    r.publish(g.data(), r.rank == 0 ? m : m2);  // rank 0: the same mask again; rank 1: a new one
    r.commit();
    std::vector<float> fresh = gradient(m, r.rank, 1);
    std::copy(fresh.begin(), fresh.end(), g.begin());
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense) << "the republished entries are retired and the new table refused";
    EXPECT_EQ(r.stats.tables_refused.load(), 1u);
    expect_exact(g, dense_sum(m, 2, 1));
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Review finding 2: a local failure (device allocation) returned before the collective or marked a
// mask agreed before its plan existed. Now the failing rank votes "not ok" and every rank stays dense.
TEST(ProxyTest, AnAllocationFailureOnOneRankKeepsEveryRankDense) {
  for (int which : {0, 1}) {
    FakeWorld world(3);
    auto ranks = make_ranks(world);
    if (which == 0) ranks[1]->backend.faults.create_layout = 1;
    else ranks[2]->backend.faults.create_buffer = 2;  // the first buffer (vote staging) succeeds
    compress::Mask m = thirds_mask(kCount);
    run_ranks(ranks, [&](Rank& r) {
      std::vector<float> g = gradient(m, r.rank);
      r.publish(g.data(), m);
      r.commit();
      Path path;
      ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kDense);
      EXPECT_EQ(r.stats.tables_refused.load(), 1u);
      expect_exact(g, dense_sum(m, 3));
    });
    EXPECT_EQ(world.mismatches(), 0u);
  }
}

// After activation a local failure must not skip or change the collective: the communicator is
// aborted and every rank gets an error promptly (no rank waits for a collective that never comes).
TEST(ProxyTest, AFailureAfterActivationAbortsTheCommunicatorOnEveryRank) {
  FakeWorld world(3);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    if (r.rank == 1) r.backend.faults.gather = 1;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "an error, not a wait";
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0) << "the communicator stays aborted";
  });
  EXPECT_TRUE(world.aborted());
  EXPECT_EQ(world.mismatches(), 0u);
  EXPECT_TRUE(ranks[1]->proxy.aborted(kComm));
  EXPECT_TRUE(ranks[1]->proxy.release(kComm)) << "the interposer must not hand a dead handle to NCCL";
}

TEST(ProxyTest, DifferentSettingsOnOneRankRefuseTheTable) {
  FakeWorld world(2);
  Ranks ranks;
  for (int r = 0; r < 2; ++r) {
    ProxyOptions o = test_options();
    if (r == 1) o.rules.max_density = 0.5;
    ranks.push_back(std::make_unique<Rank>(world, r, o));
  }
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    EXPECT_EQ(r.stats.tables_refused.load(), 1u);
  });
}

// SIEVE_PROXY=off on one rank: it passes every call through but still takes part in votes, and
// refuses, so a job with the proxy off on some nodes runs dense instead of hanging.
TEST(ProxyTest, ARankWithTheProxyOffVotesNo) {
  FakeWorld world(2);
  Ranks ranks;
  for (int r = 0; r < 2; ++r) {
    ProxyOptions o = test_options();
    o.enabled = r == 0;
    ranks.push_back(std::make_unique<Rank>(world, r, o));
  }
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    EXPECT_EQ(r.backend.last_count, kCount);
    expect_exact(g, dense_sum(m, 2));
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Review finding 6: an out-of-place call with a mask published only on recvbuff gathered sendbuff
// with it. Only the send buffer's mask says where the input is zero.
TEST(ProxyTest, OutOfPlaceCompactsOnTheSendBuffersMaskOnly) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> in(kCount, float(r.rank + 1)), out(kCount, 7.0f);
    r.publish(out.data(), m);  // on the output only: says nothing about the input's zeros
    r.commit();
    Path path;
    ASSERT_EQ(r.settle(r.proxy.all_reduce(in.data(), out.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream,
                                          &path)), 0);
    EXPECT_EQ(path, Path::kDense);
    for (float v : out) ASSERT_EQ(v, 3.0f);
    std::vector<float> g = gradient(m, r.rank), result(kCount, 7.0f);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.settle(r.proxy.all_reduce(g.data(), result.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm,
                                          kStream, &path)), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(result, dense_sum(m, 2));
    EXPECT_EQ(g, gradient(m, r.rank)) << "the input is left alone";
  });
}

// Review finding 6: a freed tensor's mask stayed registered and zeroed whatever buffer reused its
// address. Retracting (the binding does it when the tensor dies) retires it at once, before a commit.
TEST(ProxyTest, ARetractedMaskStopsAtOnce) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    const uint64_t id = r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    ASSERT_TRUE(r.registry.retract_id(id).ok());
    std::fill(g.begin(), g.end(), 1.0f);  // another tensor at the same address, dense
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    for (float v : g) ASSERT_EQ(v, 2.0f);
  });
}

// Republishing (a new pruning step) retires the old mask at once; the new one waits for its commit.
TEST(ProxyTest, ARepublishRunsDenseUntilTheNewTableIsAgreed) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount), grown = thirds_mask(kCount);
  grown.set_range(0, 300, true);  // regrowth: the new mask keeps what the old one pruned
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    r.publish(g.data(), grown);
    std::vector<float> fresh = gradient(grown, r.rank, 1);
    std::copy(fresh.begin(), fresh.end(), g.begin());
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense) << "the old mask would drop the regrown values";
    expect_exact(g, dense_sum(grown, 2, 1));
    r.commit();
    std::copy(fresh.begin(), fresh.end(), g.begin());
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    EXPECT_EQ(r.backend.last_count, grown.kept());
    expect_exact(g, dense_sum(grown, 2, 1));
  });
}

// Review finding 5: PyTorch 2.0-2.2 wraps every collective in its own group, so nothing was ever
// agreed. The vote of a commit whose next call is inside a group runs right after that group.
TEST(ProxyTest, EveryCallInItsOwnGroupStillAgreesAfterTheFirstGroup) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    for (int step = 0; step < 3; ++step) {
      std::vector<float> fresh = gradient(m, r.rank, step);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      Path path;
      ASSERT_EQ(r.proxy.group_start(), 0);
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
      ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
      EXPECT_EQ(path, step == 0 ? Path::kDense : Path::kCompactPublished) << "step " << step;
      expect_exact(g, dense_sum(m, 2, step));
    }
    EXPECT_EQ(r.backend.votes, 1);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, GroupsGatherBeforeTheLaunchAndScatterAfter) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> a = gradient(m, r.rank), b = gradient(m, r.rank, 1);
    r.publish(a.data(), m);
    r.publish(b.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(a.data(), kCount), 0) << r.backend.error;  // votes; outside any group
    std::vector<float> fa = gradient(m, r.rank), fb = gradient(m, r.rank, 1);
    std::copy(fa.begin(), fa.end(), a.begin());
    r.backend.log.clear();
    const int scatters = r.backend.scatters;
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.proxy.all_reduce(b.data(), b.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    EXPECT_EQ(r.backend.scatters, scatters) << "no scatter before the group's launch";
    ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
    EXPECT_EQ(r.backend.scatters, scatters + 2);
    expect_exact(a, dense_sum(m, 2));
    expect_exact(b, dense_sum(m, 2, 1));
  });
}

// Review finding 5: ncclGroupSimulateEnd ended NCCL's group but not the proxy's, so every later call
// was treated as grouped and its scatter deferred forever.
TEST(ProxyTest, GroupSimulateEndUnwindsTheGroupAndDropsItsWork) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    std::vector<float> fresh = gradient(m, r.rank, 2);
    std::copy(fresh.begin(), fresh.end(), g.begin());
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.proxy.group_simulate_end(nullptr), 0);
    EXPECT_EQ(g, fresh) << "a simulated group changes nothing";
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(g, dense_sum(m, 2, 2));
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, AVoteDeferredIntoASimulatedGroupRunsAtTheNextCall) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.proxy.group_simulate_end(nullptr), 0);
    EXPECT_EQ(r.backend.votes, 0);
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(r.backend.votes, 1);
    EXPECT_EQ(path, Path::kCompactPublished);
  });
}

// Review finding 4: on a non-blocking communicator the exchange treated ncclInProgress as failure,
// and scatters were enqueued before NCCL's kernel was on the stream.
TEST(ProxyTest, NonBlockingCommunicatorsCompactAndScatterOnlyAfterTheKernelIsEnqueued) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    r.backend.nonblocking = true;
    std::vector<float> a = gradient(m, r.rank), b = gradient(m, r.rank, 1);
    r.publish(a.data(), m);
    r.publish(b.data(), m);
    r.commit();
    Path path;
    ASSERT_EQ(r.all_reduce(a.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(a, dense_sum(m, 2));
    std::vector<float> fa = gradient(m, r.rank);
    std::copy(fa.begin(), fa.end(), a.begin());
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.proxy.all_reduce(b.data(), b.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.settle(r.proxy.group_end()), 0) << r.backend.error;
    expect_exact(a, dense_sum(m, 2));
    expect_exact(b, dense_sum(m, 2, 1));
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, CaptureUsesOnlyAgreedPlansAndNeverVotes) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    r.backend.begin_capture();
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    r.backend.end_capture();
    EXPECT_EQ(path, Path::kDense) << "not agreed yet: the graph holds a dense all-reduce";
    EXPECT_EQ(r.backend.votes, 0);
    ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
    expect_exact(g, dense_sum(m, 2));
    std::vector<float> fresh = gradient(m, r.rank);
    std::copy(fresh.begin(), fresh.end(), g.begin());
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;  // votes, outside capture
    EXPECT_EQ(path, Path::kCompactPublished);
    r.backend.begin_capture();
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    r.backend.end_capture();
    EXPECT_EQ(path, Path::kCompactPublished);
    for (int replay = 0; replay < 2; ++replay) {
      std::vector<float> f = gradient(m, r.rank, replay);
      std::copy(f.begin(), f.end(), g.begin());
      ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;
      expect_exact(g, dense_sum(m, 2, replay));
    }
  });
}

// Review finding 6: a graph captured a plan that a republish then replaced. The captured plan must
// outlive every replay (the fake aborts on device work with a freed layout), and a republish during
// capture runs dense.
TEST(ProxyTest, AGraphKeepsItsPlanAfterARepublishAndCaptureAfterARepublishRunsDense) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount), m2 = thirds_mask(kCount);
  m2.set_range(0, 50, false);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    r.backend.begin_capture();
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    r.backend.end_capture();
    r.publish(g.data(), m2);  // a republish: the old entry is retired
    r.commit();
    std::vector<float> f2 = gradient(m2, r.rank);
    std::copy(f2.begin(), f2.end(), g.begin());
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;  // the new table is agreed here
    expect_exact(g, dense_sum(m2, 2));
    std::copy(f2.begin(), f2.end(), g.begin());
    ASSERT_EQ(r.backend.replay(), 0) << r.backend.error;  // the old graph, with its (kept) old plan
    expect_exact(g, dense_sum(m2, 2));  // m2 keeps a subset of m: the old mask loses nothing here
    r.publish(g.data(), m);
    r.backend.begin_capture();
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    r.backend.end_capture();
    EXPECT_EQ(path, Path::kDense) << "republished during capture: dense";
  });
}

TEST(ProxyTest, ReleasingACommunicatorForgetsItsTable) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    EXPECT_EQ(r.proxy.active_entries(kComm), 1u);
    EXPECT_FALSE(r.proxy.release(kComm));
    EXPECT_EQ(r.proxy.active_entries(kComm), 0u);
    // A new communicator with the same handle starts from scratch: it votes before compacting.
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(r.backend.votes, 2);
    EXPECT_EQ(path, Path::kCompactPublished);
  });
}

TEST(ProxyTest, DenseMasksAndNonFloatEntriesAreAgreedButDoNotCompact) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask almost(kCount, true);
  almost.set_range(0, 10, false);  // density 0.99 > max_density 0.9
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(almost, r.rank);
    std::vector<int32_t> ints(kCount, 1);
    r.publish(g.data(), almost);
    r.publish(ints.data(), thirds_mask(kCount), compress::DType::kI32);
    r.commit();
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    EXPECT_EQ(r.stats.tables_activated.load(), 1u);
    EXPECT_EQ(r.proxy.active_entries(kComm), 2u);
  });
}

TEST(ProxyTest, SmallBuffersAndUnsupportedTypesPassThrough) {
  FakeWorld world(1);
  ProxyOptions o = test_options();
  o.rules.min_count = 512;
  auto ranks = make_ranks(world, o);
  Rank& r = *ranks[0];
  std::vector<float> g(kCount, 1.0f);
  r.publish(g.data(), thirds_mask(kCount));
  r.commit();
  Path path;
  ASSERT_EQ(r.all_reduce(g.data(), 100, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kOther, ReduceOp::kSum, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kOther, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  EXPECT_EQ(r.backend.votes, 1) << "the vote runs at the first call after the commit, whatever it is";
}

}  // namespace
}  // namespace sieve::plugin::proxy
