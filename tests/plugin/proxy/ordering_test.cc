// SPDX-License-Identifier: Apache-2.0
// What decides how a collective runs, and what may not: the order of calls on a
// communicator and NCCL's group nesting do; which thread issued a call, a publish meant for another
// communicator, and where a verification happened to fail do not. Ranks are threads on the fake
// backend, which fails every call of a collective whose ranks disagree on its count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 1000;
Comm const kOther = reinterpret_cast<Comm>(0x7000);

// Item 1: every rank issues the same grouped all-reduces on one communicator, in the same order;
// rank 1 issues the second step from another thread. NCCL groups belong to the thread, but which
// thread issues a communicator's calls is not part of NCCL's contract: both ranks must compact both
// steps. Before, the "one collective per plan and group" rule compared the plan's stamp with the
// calling thread's own group counter, so rank 1's new thread read its first group as the plan's and
// ran dense (1000 elements) while rank 0 compacted (401): a mismatch.
TEST(OrderingTest, AStepFromAnotherThreadRunsAsOnEveryOtherRank) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  const compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    auto step = [&](int number) {
      const std::vector<float> fresh = gradient(m, r.rank, number);
      std::copy(fresh.begin(), fresh.end(), g.begin());  // the published buffer itself
      Path path;
      ASSERT_EQ(r.proxy.group_start(), 0);
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
      ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished) << "rank " << r.rank << " step " << number;
      expect_exact(g, dense_sum(m, 2, number));
    };
    step(1);
    if (r.rank == 1) {
      std::thread other([&] { step(2); });
      other.join();
    } else {
      step(2);
    }
    step(3);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Item 1, the other way round: threads taking turns on one communicator, each opening its own
// groups, on one rank only; the rule "a plan serves one collective per group" still holds per group.
TEST(OrderingTest, ThreadsTakingTurnsKeepOneCompactionPerPlanAndGroup) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  const compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank), out(kCount), out2(kCount);
    r.publish(g.data(), m);
    r.commit();
    for (int turn = 0; turn < 4; ++turn) {
      auto body = [&] {
        Path first, second;
        ASSERT_EQ(r.proxy.group_start(), 0);
        ASSERT_EQ(r.proxy.all_reduce(g.data(), out.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &first),
                  0);
        ASSERT_EQ(
            r.proxy.all_reduce(g.data(), out2.data(), kCount, DType::kF32, ReduceOp::kMax, kComm, kStream, &second), 0);
        ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
        EXPECT_EQ(first, Path::kCompactPublished);
        EXPECT_EQ(second, Path::kDense) << "one send buffer read twice in a group: the second runs dense";
      };
      if (r.rank == 0 && turn % 2 == 1) {
        std::thread t(body);
        t.join();
      } else {
        body();
      }
      expect_exact(out, dense_sum(m, 2));
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// A thread's state lives as long as the thread. A thread that arms a commit token and exits without
// its all-reduce leaves nothing armed for the next thread, which glibc usually gives the same
// std::thread::id (the exited thread's cached stack). Before, the proxy kept each thread's state by
// that id: the next thread inherited the dead one's armed token, and an ordinary all-reduce of the
// same buffer ran as a commit on this rank only (and ThreadSanitizer saw two threads share a state).
TEST(OrderingTest, AThreadThatExitsLeavesNoArmedTokenToTheNextThread) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  run_ranks(ranks, [&](Rank& r) {
    int64_t words[kVoteWords] = {1, 2, 3, 4, 5, 6};
    if (r.rank == 0) std::thread([&] { r.proxy.arm_commit(words, 0); }).join();
    Path path = Path::kCommit;
    auto reduce = [&] {
      EXPECT_EQ(
          r.settle(r.proxy.all_reduce(words, words, kVoteWords, DType::kI64, ReduceOp::kMax, kComm, kStream, &path)), 0)
          << r.backend.error;
    };
    if (r.rank == 0) std::thread(reduce).join();
    else reduce();
    EXPECT_NE(path, Path::kCommit) << "rank " << r.rank;
    EXPECT_EQ(words[5], 6);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

// Item 4: a publish meant for another communicator, landing before communicator A's commit on one
// rank and after it on the other, must not decide A's verdict: scoped to its communicator, it is
// not part of what A votes on. Before, a commit took every mask staged in the process, so A's
// commit was refused (and A's active table dropped).
TEST(OrderingTest, APublishForAnotherCommunicatorNeverDecidesThisOnesCommit) {
  FakeWorld world(2), other(2);
  auto ranks = make_ranks(world);
  for (auto& r : ranks) r->backend.join(kOther, other, r->rank);
  const compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank), side = gradient(m, r.rank, 5);
    ASSERT_TRUE(r.registry
                    .publish(g.data(), compress::DType::kF32, std::make_shared<const compress::Mask>(m), nullptr,
                             comm_scope(kComm))
                    .ok());
    auto publish_side = [&] {
      ASSERT_TRUE(r.registry
                      .publish(side.data(), compress::DType::kF32, std::make_shared<const compress::Mask>(m), nullptr,
                               comm_scope(kOther))
                      .ok());
    };
    if (r.rank == 0) {
      std::thread t(publish_side);  // another thread, before A's commit on this rank only
      t.join();
    }
    EXPECT_EQ(r.commit(0, kComm).state, CommitOutcome::State::kActivated);
    if (r.rank == 1) {
      std::thread t(publish_side);
      t.join();
    }
    EXPECT_EQ(r.commit(0, kComm).state, CommitOutcome::State::kActivated) << "still only A's own and unscoped masks";
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(g, dense_sum(m, 2));
    // The other communicator's commit takes its own mask (and the unscoped ones).
    EXPECT_EQ(r.commit(0, kOther).masks, 1u);
  });
  EXPECT_EQ(world.mismatches(), 0u);
  EXPECT_EQ(other.mismatches(), 0u);
}

// Item 4: a buffer carries masks of one scope only; a publish over another scope's mask is refused
// and changes nothing there; an unscoped publish is for every communicator.
TEST(OrderingTest, ScopesNeverOverlap) {
  compress::MaskRegistry registry;
  std::vector<float> buf(kCount);
  const auto mask = std::make_shared<const compress::Mask>(thirds_mask(kCount));
  ASSERT_TRUE(registry.publish(buf.data(), compress::DType::kF32, mask, nullptr, comm_scope(kComm)).ok());
  EXPECT_FALSE(registry.publish(buf.data() + 10, compress::DType::kF32, mask, nullptr, comm_scope(kOther)).ok());
  EXPECT_FALSE(registry.publish(buf.data(), compress::DType::kF32, mask, nullptr, 0).ok());
  EXPECT_EQ(registry.snapshot(comm_scope(kComm)).size(), 1u);
  EXPECT_EQ(registry.snapshot(comm_scope(kOther)).size(), 0u);
  std::vector<float> shared(kCount);
  ASSERT_TRUE(registry.publish(shared.data(), compress::DType::kF32, mask, nullptr, 0).ok());
  EXPECT_EQ(registry.snapshot(comm_scope(kComm)).size(), 2u);
  EXPECT_EQ(registry.snapshot(comm_scope(kOther)).size(), 1u);
  ASSERT_TRUE(registry.publish(buf.data(), compress::DType::kF32, mask, nullptr, comm_scope(kComm)).ok())
      << "the same scope replaces, as before";
}

// Item 5: SIEVE_PROXY_VERIFY on a reduce-scatter whose difference shows in one rank's shard only:
// every rank fails the call and aborts the communicator. Before, the rank whose shard differed
// aborted and the other returned success (and would later wait on it).
TEST(OrderingTest, AVerificationMismatchOnOneRankAbortsEveryRank) {
  ProxyOptions o = test_options();
  o.verify = true;
  for (int kind = 0; kind < 2; ++kind) {  // reduce-scatter, all-reduce
    FakeWorld world(2);
    auto ranks = make_ranks(world, o);
    const compress::Mask m = thirds_mask(kCount);
    LogCapture log;
    run_ranks(ranks, [&](Rank& r) {
      std::vector<float> g = gradient(m, r.rank), mine(kCount / 2);
      // Rank 0 holds a nonzero where the mask prunes, in rank 1's shard (element 601).
      if (r.rank == 0) g[601] = 4.0f;
      ASSERT_FALSE(m.test(601));
      if (kind == 0)
        ASSERT_TRUE(r.registry
                        .publish_collective(compress::Collective::kReduceScatter, compress::DType::kF32,
                                            std::make_shared<const compress::Mask>(m), nullptr)
                        .ok());
      else r.publish(g.data(), m);
      r.commit();
      const int rc = kind == 0 ? r.settle(r.proxy.reduce_scatter(g.data(), mine.data(), kCount / 2, DType::kF32,
                                                                 ReduceOp::kSum, kComm, kStream))
                               : r.all_reduce(g.data(), kCount);
      EXPECT_NE(rc, 0) << "rank " << r.rank << (kind == 0 ? " reduce-scatter" : " all-reduce");
      EXPECT_TRUE(r.proxy.aborted(kComm)) << "rank " << r.rank;
    });
    EXPECT_GE(log.count("differs from the dense result at element"), 1u);
  }
}

// An infinite gradient (an fp16/AMP overflow) at 3 ranks. One inf made the
// tolerance of the reordered sum infinite, and inf - inf is NaN: every rank aborted a job whose
// compacted and dense results were identical. Non-finite values compare by identity; the call's
// other elements are checked as before, so a real difference beside an inf still aborts.
TEST(OrderingTest, VerificationComparesInfinitiesByIdentityAndStillChecksTheRest) {
  ProxyOptions o = test_options();
  o.verify = true;
  const compress::Mask m = thirds_mask(kCount);
  ASSERT_TRUE(m.test(0) && m.test(3) && m.test(6) && !m.test(601));
  for (const bool liar : {false, true}) {
    FakeWorld world(3);
    auto ranks = make_ranks(world, o);
    LogCapture log;
    run_ranks(ranks, [&](Rank& r) {
      std::vector<float> g = gradient(m, r.rank);
      const float inf = std::numeric_limits<float>::infinity();
      if (r.rank == 0) g[0] = inf, g[6] = -inf;
      if (r.rank == 1) g[3] = inf;
      if (r.rank == 2) g[6] = inf;             // -inf + inf: NaN on both runs
      if (liar && r.rank == 2) g[601] = 4.0f;  // pruned by the mask: the compacted result drops it
      r.publish(g.data(), m);
      ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
      Path path;
      const int rc = r.all_reduce(g.data(), kCount, &path);
      EXPECT_EQ(path, Path::kCompactPublished);
      if (liar) {
        EXPECT_NE(rc, 0) << "rank " << r.rank;
        EXPECT_TRUE(r.proxy.aborted(kComm)) << "rank " << r.rank;
        return;
      }
      ASSERT_EQ(rc, 0) << "rank " << r.rank << ": " << r.backend.error;
      EXPECT_FALSE(r.proxy.aborted(kComm));
      EXPECT_EQ(g[0], inf);
      EXPECT_EQ(g[3], inf);
      EXPECT_TRUE(std::isnan(g[6]));
    });
    EXPECT_EQ(log.count("differs from the dense result at element 601") > 0, liar);
    EXPECT_EQ(log.count("differs from the dense result at element 0 "), 0u);
  }
}

// Item 5 inside a group over two communicators: the verdicts are shared at the group's end, together
// (one exchange per communicator, in one group, so one thread driving several ranks can make
// progress); the communicator where one rank's shard differs aborts on every rank, the other lives.
TEST(OrderingTest, VerdictsOfAGroupAreSharedPerCommunicator) {
  ProxyOptions o = test_options();
  o.verify = true;
  FakeWorld world(2), other(2);
  auto ranks = make_ranks(world, o);
  for (auto& r : ranks) r->backend.join(kOther, other, r->rank);
  const compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> a = gradient(m, r.rank), b = gradient(m, r.rank), mine(kCount / 2);
    if (r.rank == 0) a[601] = 4.0f;  // in rank 1's shard, where the mask prunes
    ASSERT_TRUE(r.registry
                    .publish_collective(compress::Collective::kReduceScatter, compress::DType::kF32,
                                        std::make_shared<const compress::Mask>(m), nullptr)
                    .ok());
    r.publish(b.data(), m);
    r.commit(0, kComm);
    r.commit(0, kOther);
    ASSERT_EQ(r.proxy.group_start(), 0);
    EXPECT_TRUE(enqueued(
        r.proxy.reduce_scatter(a.data(), mine.data(), kCount / 2, DType::kF32, ReduceOp::kSum, kComm, kStream)));
    EXPECT_TRUE(enqueued(r.proxy.all_reduce(b.data(), b.data(), kCount, DType::kF32, ReduceOp::kSum, kOther, kStream)));
    EXPECT_NE(r.proxy.group_end(), 0) << "rank " << r.rank;
    EXPECT_TRUE(r.proxy.aborted(kComm)) << "rank " << r.rank;
    EXPECT_FALSE(r.proxy.aborted(kOther)) << "rank " << r.rank;
    expect_exact(b, dense_sum(m, 2));
  });
}

}  // namespace
}  // namespace sieve::plugin::proxy
