// SPDX-License-Identifier: Apache-2.0
// A communicator's life around aborts: the proxy's own abort against a watchdog thread
// polling ncclCommGetAsyncError, the job's teardown after an abort that kept the handle (NCCL's
// ncclCommRevoke), and a new communicator at a dead one's address (and the dead handle's teardown).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

constexpr uint64_t kCount = 1000;

// A watchdog polls the communicator's error from its own thread, as PyTorch's does, while the
// proxy aborts it after a local failure. The fake spends a while inside each poll and records an
// abort that frees the handle during one, or a poll of a freed handle.
TEST(LifetimeTest, AWatchdogPollingWhileTheProxyAbortsNeverReachesAFreedHandle) {
  for (int round = 0; round < 3; ++round) {
    FakeWorld world(1);
    auto ranks = make_ranks(world);
    Rank& r = *ranks[0];
    compress::Mask m = thirds_mask(kCount);
    std::vector<float> g = gradient(m, 0);
    r.publish(g.data(), m);
    ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    std::atomic<bool> stop{false};
    std::atomic<int> polls{0}, last{-1};
    std::thread watchdog([&] {
      while (!stop.load()) {
        int error = -1;
        ASSERT_EQ(r.proxy.async_error(kComm, &error), 0);
        last = error;
        ++polls;
      }
    });
    while (polls.load() < 3) std::this_thread::yield();
    r.backend.faults.gather = 1;
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0);  // the proxy aborts the communicator
    const int after = polls.load();
    while (polls.load() < after + 3) std::this_thread::yield();
    stop = true;
    watchdog.join();
    EXPECT_EQ(r.backend.aborts, 1);
    EXPECT_EQ(r.backend.error, "") << "the abort freed the handle under a poll, or a poll reached it afterwards";
    EXPECT_EQ(last.load(), kResultSystemError) << "an aborted communicator reports its error";
    EXPECT_TRUE(r.proxy.release(kComm, nullptr)) << "the handle is dead: the job's destroy must not reach NCCL";
  }
}

// With ncclCommRevoke the proxy's abort leaves the handle valid: the job's own ncclCommDestroy (or
// ncclCommAbort) must still reach NCCL, or the communicator's resources are never freed.
TEST(LifetimeTest, AfterARevokeTheJobsTeardownStillReachesNccl) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    r.backend.keeps_handle = true;
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    if (r.rank == 0) r.backend.faults.gather = 1;
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0);
  });
  EXPECT_TRUE(ranks[0]->proxy.aborted(kComm));
  EXPECT_FALSE(ranks[0]->proxy.release(kComm, nullptr)) << "revoked, not freed: the job's teardown goes to NCCL";
  int error = 0;
  EXPECT_EQ(ranks[0]->proxy.async_error(kComm, &error), 0);
  EXPECT_EQ(error, kResultSystemError);
}

// After the proxy aborted a communicator (and NCCL freed it), NCCL may create a new one at the same
// address: the interposed creation calls forget the dead one's state there, so the new one works.
TEST(LifetimeTest, ANewCommunicatorAtADeadOnesAddressIsNotTakenForIt) {
  FakeWorld world(2), reborn(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    if (r.rank == 1) r.backend.faults.gather = 1;
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0);
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0) << "the dead handle's calls fail";
    // The trainer frees this buffer: its mask goes with it. Left staged, it would join the next
    // commit on ranks whose next buffer the allocator put elsewhere, and not on the others.
    EXPECT_TRUE(r.registry.retract(g.data()).ok());
  });
  for (auto& r : ranks) {
    r->backend.join(kComm, reborn, r->rank);  // NCCL gives the new communicator the same address
    r->proxy.created(kComm);                  // what ncclCommInitRank* / Split / Shrink do first
  }
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    Path path;
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kPassThrough) << "a new communicator: nothing committed on it yet";
    expect_exact(g, dense_sum(m, 2));
    r.publish(g.data(), m);  // this phase's buffer
    EXPECT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    std::vector<float> f = gradient(m, r.rank);
    std::copy(f.begin(), f.end(), g.begin());
    ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(g, dense_sum(m, 2));
  });
  EXPECT_EQ(reborn.mismatches(), 0u);
}

// NCCL < 2.28 (no revoke): the proxy's abort frees the handle, NCCL creates a new communicator at
// the same address, and only then does the job tear down its old handle (interpose.cc's
// ncclCommDestroy: NCCL only when teardown() says so). Review (issue 50, class 6): the creation
// forgot the address, so the proxy no longer knew that it owned that abort, and the teardown
// destroyed the new communicator.
TEST(LifetimeTest, ADeadHandlesTeardownNeverReachesANewCommunicatorAtItsAddress) {
  FakeWorld world(2), reborn(2);
  auto ranks = make_ranks(world);
  compress::Mask m = thirds_mask(kCount);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    r.publish(g.data(), m);
    r.commit();
    if (r.rank == 0) r.backend.faults.gather = 1;  // rank 0's proxy aborts; rank 1 sees the abort
    EXPECT_NE(r.all_reduce(g.data(), kCount), 0);
    EXPECT_TRUE(r.registry.retract(g.data()).ok());
  });
  Rank& r0 = *ranks[0];
  ASSERT_TRUE(r0.proxy.aborted(kComm));
  // Rank 1's job tears its handle down at once (its abort reached NCCL); rank 0's job creates the
  // new communicator first, as a restart that rebuilds the process group before dropping the old.
  if (ranks[1]->proxy.teardown(kComm, nullptr)) ranks[1]->backend.destroy_comm(kComm);
  for (auto& r : ranks) {
    r->backend.join(kComm, reborn, r->rank);
    r->proxy.created(kComm);
  }
  EXPECT_TRUE(r0.proxy.dead_handle(kComm)) << "ncclCommFinalize of the dead handle must not reach NCCL";
  if (r0.proxy.teardown(kComm, nullptr)) r0.backend.destroy_comm(kComm);  // the old handle
  EXPECT_EQ(r0.backend.error, "");
  EXPECT_FALSE(reborn.aborted()) << "the dead handle's teardown destroyed the new communicator";
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    ASSERT_EQ(r.all_reduce(g.data(), kCount), 0) << r.backend.error;
    expect_exact(g, dense_sum(m, 2));
  });
  EXPECT_FALSE(r0.proxy.dead_handle(kComm));
  EXPECT_TRUE(r0.proxy.teardown(kComm, nullptr)) << "the new communicator's own teardown reaches NCCL";
}

// The thread that last called a communicator kept its state alive after NCCL tore
// it down, and with it the agreed table: sieve_mask_released stayed 0 for a retracted mask whose only
// communicator was gone, for as long as the training thread lived (and the binding kept the tensor).
TEST(LifetimeTest, AMaskIsReleasedOnceItsOnlyCommunicatorIsDestroyedWhileTheCallerLives) {
  FakeWorld world(1);
  auto ranks = make_ranks(world);
  Rank& r = *ranks[0];  // driven from this thread, which outlives the communicator
  compress::Mask m = thirds_mask(kCount);
  std::vector<float> g = gradient(m, 0);
  const uint64_t id = r.publish(g.data(), m);
  ASSERT_EQ(r.commit().state, CommitOutcome::State::kActivated);
  Path path;
  ASSERT_EQ(r.all_reduce(g.data(), kCount, &path), 0) << r.backend.error;
  ASSERT_EQ(path, Path::kCompactPublished);
  ASSERT_TRUE(r.registry.retract(g.data()).ok());
  bool released = true;
  ASSERT_TRUE(r.registry.released(id, &released).ok());
  EXPECT_FALSE(released) << "the communicator's agreed table still holds it";
  EXPECT_FALSE(r.proxy.release(kComm, nullptr));  // ncclCommDestroy: the proxy first, then NCCL
  r.proxy.forget(kComm);
  ASSERT_TRUE(r.registry.released(id, &released).ok());
  EXPECT_TRUE(released) << "no communicator holds it any more";
}

}  // namespace
}  // namespace sieve::plugin::proxy
