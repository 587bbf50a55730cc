// SPDX-License-Identifier: Apache-2.0
// "Nothing is allocated on the hot path" (docs/DESIGN.md), counted: after a commit and a warm-up,
// compacted collectives — alone, in groups, reduce-scatter and all-gather — and pass-through calls
// allocate nothing. Review: a std::function per compacted call allocated once per call.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "plugin/proxy/proxy.h"
#include "tests/plugin/proxy/null_backend.h"

namespace {
thread_local bool t_counting = false;
thread_local uint64_t t_allocations = 0;
}  // namespace

// The replaced operator new takes its memory from malloc, so its operator delete gives it back with
// free; GCC cannot see that the two are a pair here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace sieve::plugin::proxy {
namespace {

using testing::NullBackend;

Comm const kComm = reinterpret_cast<Comm>(0x1000);
Stream const kStream = reinterpret_cast<Stream>(0x2000);

// Allocations made by `body` on this thread.
template <typename Body> uint64_t allocations(Body&& body) {
  t_allocations = 0;
  t_counting = true;
  body();
  t_counting = false;
  return t_allocations;
}

TEST(AllocationTest, CompactedAndPassThroughCallsAllocateNothing) {
  NullBackend backend;
  compress::MaskRegistry registry;
  ProcessStats stats;
  ProxyOptions options;
  options.rules.min_count = 1;
  Proxy proxy(backend, registry, options, stats);
  constexpr uint64_t kCount = 1 << 16;
  std::vector<float> a(kCount), b(kCount), plain(kCount), out(kCount);
  auto mask = std::make_shared<compress::Mask>(kCount, false);
  for (uint64_t i = 0; i < kCount; i += 5) mask->set_range(i, 1, true);
  ASSERT_TRUE(registry.publish(a.data(), compress::DType::kF32, mask, nullptr).ok());
  ASSERT_TRUE(registry.publish(b.data(), compress::DType::kF32, mask, nullptr).ok());
  CommitOutcome outcome;
  ASSERT_EQ(proxy.commit(kComm, kStream, 0, &outcome), 0);
  ASSERT_EQ(outcome.state, CommitOutcome::State::kActivated);
  auto calls = [&] {
    Path path;
    EXPECT_EQ(proxy.all_reduce(a.data(), a.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    EXPECT_EQ(proxy.all_reduce(plain.data(), plain.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    EXPECT_EQ(proxy.group_start(), 0);
    EXPECT_EQ(proxy.all_reduce(a.data(), out.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(proxy.all_reduce(b.data(), b.data(), kCount, DType::kF32, ReduceOp::kMax, kComm, kStream), 0);
    EXPECT_EQ(proxy.group_end(), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    EXPECT_EQ(
        proxy.reduce_scatter(a.data(), out.data(), kCount / 2, DType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    EXPECT_EQ(proxy.all_gather(out.data(), b.data(), kCount / 2, DType::kF32, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
  };
  calls();  // warm-up: this thread's group state and its work list reach their size once
  EXPECT_EQ(allocations([&] {
              for (int i = 0; i < 100; ++i) calls();
            }),
            0u);
  EXPECT_EQ(stats.collectives_compacted.load(), 101u * 5);
}

// SIEVE_TRACK=observe read each record into a fresh mask, one allocation per
// all-reduce. The record is read into the signature's own mask now.
TEST(AllocationTest, ObservedAllReducesAllocateNothingAfterWarmUp) {
  NullBackend backend;
  compress::MaskRegistry registry;
  ProcessStats stats;
  ProxyOptions options;
  options.rules.min_count = 1;
  options.track = config::Track::kObserve;
  Proxy proxy(backend, registry, options, stats);
  constexpr uint64_t kCount = 1 << 16;
  std::vector<float> g(kCount);
  auto call = [&] {
    EXPECT_EQ(proxy.all_reduce(g.data(), g.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  };
  for (int i = 0; i < 10; ++i) call();  // warm-up: records, the tracker's pattern, this thread's state
  EXPECT_EQ(allocations([&] {
              for (int i = 0; i < 100; ++i) call();
            }),
            0u);
  EXPECT_EQ(stats.learned_calls_observed.load(), 110u);
  EXPECT_GT(stats.learned_bytes_saved.load(), 0u) << "the pattern was read and found stable";
}

}  // namespace
}  // namespace sieve::plugin::proxy
