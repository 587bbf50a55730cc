// SPDX-License-Identifier: Apache-2.0
// Agreements at a group's end (learned-mask votes, union merges, their second votes) on several
// communicators at once: every communicator's next exchange is issued in one NCCL group, so a group
// completes when one thread drives several ranks of one communicator (ncclCommInitAll) and when
// ranks put communicators into a group in different orders. Review (issue 50, class 2): each
// agreement ran as a blocking collective, one communicator after another, and both programs hung.
// A hang is a failure here: the fake world gives up on a rank that never comes, and each program
// must end within a liveness bound.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "plugin/sieve.h"
#include "tests/common/liveness.h"
#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

Comm const kA = reinterpret_cast<Comm>(0x1000);
Comm const kB = reinterpret_cast<Comm>(0x3000);
constexpr uint64_t kCount = 96;

ProxyOptions learning() {
  ProxyOptions o = test_options();
  o.track = config::Track::kOn;
  o.track_stable = 2;
  o.track_lag = 1;
  return o;
}

// Runs `body` on threads of its own; false (and a failure) when they do not end within the bound.
bool ends_in_time(const std::function<void()>& body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(liveness::bound(std::chrono::seconds(10))) == std::future_status::ready) return true;
  ADD_FAILURE() << "the program hung at a group's end (its agreements waited on one communicator at a time)";
  done.wait();  // the fake world gives up on ranks that never come
  return false;
}

// A rank's gradient for one communicator's all-reduce: its own pattern (rank and communicator),
// the same at every step, so that learning settles; union masks cover each rank's. Without a
// union (`own` false) every rank keeps one pattern per communicator.
bool kept(int rank, int comm, bool own, uint64_t i) {
  return i % 4 == 0 || i % 11 == uint64_t((own ? rank : 0) + comm);
}

std::vector<float> gradient_of(int rank, int comm, bool own, int step) {
  std::vector<float> g(kCount, 0.0f);
  for (uint64_t i = 0; i < kCount; ++i)
    if (kept(rank, comm, own, i)) g[i] = float(rank + 1) + float(i % 5) + float(step);
  return g;
}

compress::Mask pattern_of(int rank, int comm, bool own) {
  compress::Mask m(kCount, false);
  for (uint64_t i = 0; i < kCount; ++i)
    if (kept(rank, comm, own, i)) m.set_range(i, 1, true);
  return m;
}

std::vector<float> sum_of(int nranks, int comm, bool own, int step) {
  std::vector<float> s(kCount, 0.0f);
  for (int r = 0; r < nranks; ++r) {
    const std::vector<float> g = gradient_of(r, comm, own, step);
    for (uint64_t i = 0; i < kCount; ++i) s[i] += g[i];
  }
  return s;
}

// One rank's part in one communicator: its buffer, what it publishes, and its calls.
struct Part {
  Comm comm;
  int rank;
  int comm_index;
  std::vector<float> buffer = std::vector<float>(kCount);
};

// What one thread runs: a commit (`flags`: a union, or not) of every part's communicator in one
// group, then six
// groups holding one all-reduce per part (learned votes come due in the same group on every
// communicator), each checked against the dense sum. The parts enter each group in their order.
void drive(Proxy& proxy, compress::MaskRegistry& registry, std::vector<Part>& parts, int nranks, uint32_t flags,
           std::vector<Path>* last_paths, std::string* error) {
  const int steps = 6;
  const bool own = flags & SIEVE_COMMIT_UNION;
  for (Part& p : parts) {
    uint64_t id = 0;
    EXPECT_TRUE(registry
                    .publish(p.buffer.data(), compress::DType::kF32,
                             std::make_shared<const compress::Mask>(pattern_of(p.rank, p.comm_index, own)), &id,
                             comm_scope(p.comm))
                    .ok());
  }
  ASSERT_EQ(proxy.group_start(), 0);
  for (Part& p : parts) ASSERT_EQ(proxy.commit(p.comm, kStream, flags, nullptr), 0);
  ASSERT_EQ(proxy.group_end(), 0) << *error;
  for (Part& p : parts) {
    ASSERT_EQ(proxy.commits(p.comm), 1u);
    ASSERT_EQ(proxy.active_entries(p.comm), 1u);
  }
  // The published buffers compact; a second buffer per part (same count) is learned.
  std::vector<std::vector<float>> learned(parts.size(), std::vector<float>(kCount));
  for (int s = 0; s < steps; ++s) {
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::vector<float> g = gradient_of(parts[k].rank, parts[k].comm_index, own, s);
      parts[k].buffer = g;
      learned[k] = g;
    }
    last_paths->assign(parts.size() * 2, Path::kPassThrough);
    ASSERT_EQ(proxy.group_start(), 0);
    for (size_t k = 0; k < parts.size(); ++k) {
      Part& p = parts[k];
      ASSERT_EQ(proxy.all_reduce(p.buffer.data(), p.buffer.data(), kCount, DType::kF32, ReduceOp::kSum, p.comm, kStream,
                                 &(*last_paths)[2 * k]),
                0);
      ASSERT_EQ(proxy.all_reduce(learned[k].data(), learned[k].data(), kCount, DType::kF32, ReduceOp::kSum, p.comm,
                                 kStream, &(*last_paths)[2 * k + 1]),
                0);
    }
    ASSERT_EQ(proxy.group_end(), 0) << *error;
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::vector<float> want = sum_of(nranks, parts[k].comm_index, own, s);
      expect_exact(parts[k].buffer, want);
      expect_exact(learned[k], want);
    }
  }
}

// ncclCommInitAll: one process, one thread, every rank of the communicator; each group holds every
// rank's commit, then every rank's all-reduces.
TEST(GroupAgreement, OneThreadDrivingEveryRankCompletesUnionsAndLearnedVotes) {
  for (int nranks : {2, 3})
    for (uint32_t flags : {uint32_t(SIEVE_COMMIT_UNION), uint32_t(0)}) {
      FakeWorld world(nranks);
      compress::MaskRegistry registry;
      ProcessStats stats;
      FakeBackend backend(world, 0, kA);
      std::vector<Part> parts;
      for (int r = 0; r < nranks; ++r) {
        const Comm c = reinterpret_cast<Comm>(0x1000 + 0x100 * r);
        if (r > 0) backend.join(c, world, r);
        parts.push_back(Part{c, r, 0});
      }
      Proxy proxy(backend, registry, learning(), stats);
      std::vector<Path> paths;
      ASSERT_TRUE(ends_in_time([&] { drive(proxy, registry, parts, nranks, flags, &paths, &backend.error); }));
      EXPECT_EQ(world.mismatches(), 0u);
      EXPECT_FALSE(world.aborted()) << backend.error;
      for (size_t k = 0; k < paths.size(); ++k)
        EXPECT_EQ(paths[k], k % 2 ? Path::kCompactLearned : Path::kCompactPublished) << "call " << k;
    }
}

// Two processes, two communicators; one process puts A before B into each group, the other B
// before A (NCCL launches a group's communicators together, so this is legal). Either launch
// order of the fake: in order, and a random interleaving.
TEST(GroupAgreement, RanksOrderingCommunicatorsDifferentlyCompleteTheirAgreements) {
  for (uint64_t interleave : {uint64_t(0), uint64_t(7), uint64_t(8)})
    for (uint32_t flags : {uint32_t(SIEVE_COMMIT_UNION), uint32_t(0)}) {
      FakeWorld a(2), b(2);
      Ranks ranks;
      for (int r = 0; r < 2; ++r) {
        ranks.push_back(std::make_unique<Rank>(a, r, learning()));
        ranks.back()->backend.join(kB, b, r);
        ranks.back()->backend.interleave_seed = interleave ? interleave + uint64_t(r) : 0;
      }
      std::vector<std::vector<Path>> paths(2);
      ASSERT_TRUE(ends_in_time([&] {
        run_ranks(ranks, [&](Rank& rank) {
          std::vector<Part> parts{Part{kA, rank.rank, 0}, Part{kB, rank.rank, 1}};
          if (rank.rank == 1) std::swap(parts[0], parts[1]);
          drive(rank.proxy, rank.registry, parts, 2, flags, &paths[size_t(rank.rank)], &rank.backend.error);
        });
      }));
      EXPECT_EQ(a.mismatches(), 0u);
      EXPECT_EQ(b.mismatches(), 0u);
      EXPECT_FALSE(a.aborted() || b.aborted()) << ranks[0]->backend.error << ranks[1]->backend.error;
      for (auto& r : ranks)
        EXPECT_EQ(r->backend.comm_log[kA], ranks[0]->backend.comm_log[kA]) << "interleave " << interleave;
      for (auto& r : ranks)
        EXPECT_EQ(r->backend.comm_log[kB], ranks[0]->backend.comm_log[kB]) << "interleave " << interleave;
      for (const std::vector<Path>& p : paths)
        for (size_t k = 0; k < p.size(); ++k)
          EXPECT_EQ(p[k], k % 2 ? Path::kCompactLearned : Path::kCompactPublished) << "call " << k;
    }
}

}  // namespace
}  // namespace sieve::plugin::proxy
