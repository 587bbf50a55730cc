// The proxy's host logic on the CPU: ranks are threads, each with its own registry, stats and fake
// backend over one FakeWorld whose all-reduce reduces for real and fails (instead of hanging) when
// ranks disagree on a count.
#include "plugin/proxy/proxy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "tests/proxy/fake_backend.h"

namespace sieve::plugin::proxy {
namespace {

using testing::FakeBackend;
using testing::FakeWorld;

constexpr uint64_t kCount = 1000;
Comm const kComm = reinterpret_cast<Comm>(0x1000);
Stream const kStream = reinterpret_cast<Stream>(0x2000);

struct Rank {
  Rank(FakeWorld& world, int r, ProxyOptions options)
      : rank(r), backend(world, r), proxy(backend, registry, options, stats) {}
  int rank;
  compress::MaskRegistry registry;
  ProcessStats stats;
  FakeBackend backend;
  Proxy proxy;
};

ProxyOptions small_options() {
  ProxyOptions o;
  o.min_count = 1;
  return o;
}

// Runs body(rank) on every rank at once; all ranks' bodies must finish.
void run_ranks(std::vector<std::unique_ptr<Rank>>& ranks, const std::function<void(Rank&)>& body) {
  std::vector<std::thread> threads;
  for (auto& r : ranks) threads.emplace_back([&body, &r] { body(*r); });
  for (auto& t : threads) t.join();
}

std::vector<std::unique_ptr<Rank>> make_ranks(FakeWorld& world, ProxyOptions options = small_options()) {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < world.ranks(); ++r) ranks.push_back(std::make_unique<Rank>(world, r, options));
  return ranks;
}

// Every third element kept, plus a long kept run in the middle.
compress::Mask test_mask() {
  compress::Mask m(kCount, false);
  for (uint64_t i = 0; i < kCount; i += 3) m.set_range(i, 1, true);
  m.set_range(400, 100, true);
  return m;
}

// Rank r's gradient: nonzero exactly where the mask keeps, -0.0 where it prunes (as torch's prune).
std::vector<float> gradient(const compress::Mask& m, int rank, int step = 0) {
  std::vector<float> g(m.count());
  for (uint64_t i = 0; i < m.count(); ++i) g[i] = m.test(i) ? float(rank + 1) * 0.5f + float(i % 17) + float(step) : -0.0f;
  return g;
}

// Overwrites a buffer in place: its address is what masks are published for.
void refill(std::vector<float>& buffer, const std::vector<float>& values) {
  std::copy(values.begin(), values.end(), buffer.begin());
}

void publish(Rank& r, const void* base, const compress::Mask& m) {
  uint64_t id = 0;
  ASSERT_TRUE(r.registry.publish(base, sizeof(float), std::make_shared<const compress::Mask>(m), &id).ok());
}

std::vector<float> dense_sum(const compress::Mask& m, int ranks, int step = 0) {
  std::vector<float> sum(m.count(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> g = gradient(m, r, step);
    for (uint64_t i = 0; i < m.count(); ++i) sum[i] += g[i];
  }
  return sum;
}

void expect_exact(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "element " << i;
    if (want[i] == 0.0f) {
      ASSERT_FALSE(std::signbit(got[i])) << "masked element " << i << " must be exact +0";
    }
  }
}

TEST(ProxyTest, NothingPublishedPassesThroughWithoutExchange) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kPassThrough);
    EXPECT_EQ(r.backend.agrees, 0);
    EXPECT_EQ(r.backend.last_count, kCount);
    EXPECT_EQ(r.stats.collectives_dense.load(), 1u);
  });
}

TEST(ProxyTest, PublishedMaskCompactsInPlaceExactly) {
  FakeWorld world(3);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    publish(r, g.data(), m);
    for (int step = 0; step < 3; ++step) {
      refill(g, gradient(m, r.rank, step));
      Path path;
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0)
          << r.backend.error;
      EXPECT_EQ(path, Path::kCompactPublished);
      EXPECT_EQ(r.backend.last_count, m.kept());
      expect_exact(g, dense_sum(m, 3, step));
    }
    EXPECT_EQ(r.backend.agrees, 1) << "the hash check runs once, before first use";
    EXPECT_EQ(r.backend.plans_created, 1) << "the plan is cached";
    EXPECT_EQ(r.stats.collectives_compacted.load(), 3u);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, OutOfPlaceUsesTheSendBuffersMask) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank), out(kCount, 7.0f);
    publish(r, g.data(), m);
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), out.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(out, dense_sum(m, 2));
    EXPECT_EQ(g, gradient(m, r.rank)) << "the input is left alone";
  });
}

TEST(ProxyTest, EveryOpAgreesWithDenseOnBothFloatTypes) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    FakeWorld world(2);
    auto ranks = make_ranks(world);
    compress::Mask m = test_mask();
    run_ranks(ranks, [&](Rank& r) {
      std::vector<double> g(kCount), want(kCount);
      for (uint64_t i = 0; i < kCount; ++i) g[i] = m.test(i) ? (r.rank ? -1.5 : 2.0) + double(i % 5) : 0.0;
      for (uint64_t i = 0; i < kCount; ++i) {
        const double a = m.test(i) ? 2.0 + double(i % 5) : 0.0, b = m.test(i) ? -1.5 + double(i % 5) : 0.0;
        switch (op) {
          case ReduceOp::kSum: want[i] = a + b; break;
          case ReduceOp::kProd: want[i] = a * b; break;
          case ReduceOp::kMax: want[i] = std::max(a, b); break;
          case ReduceOp::kMin: want[i] = std::min(a, b); break;
          default: want[i] = (a + b) / 2; break;
        }
      }
      uint64_t id;
      ASSERT_TRUE(r.registry.publish(g.data(), sizeof(double), std::make_shared<const compress::Mask>(m), &id).ok());
      Path path;
      ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF64, op, kComm, kStream, &path), 0);
      EXPECT_EQ(path, Path::kCompactPublished);
      for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(g[i], want[i]) << reduce_op_name(op) << " element " << i;
    });
  }
}

TEST(ProxyTest, RepublishRebuildsThePlanAndAgreesAgainUnrelatedPublishDoesNot) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask(), m2 = test_mask();
  m2.set_range(0, 200, false);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank), other(64, 1.0f);
    publish(r, g.data(), m);
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    publish(r, other.data(), compress::Mask(64, false));  // another buffer: same plan, no exchange
    refill(g, gradient(m, r.rank));
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    EXPECT_EQ(r.backend.agrees, 1);
    EXPECT_EQ(r.backend.plans_created, 1);
    publish(r, g.data(), m2);  // this buffer's mask changed
    refill(g, gradient(m2, r.rank));
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    EXPECT_EQ(r.backend.agrees, 2);
    EXPECT_EQ(r.backend.plans_created, 2);
    EXPECT_EQ(r.backend.last_count, m2.kept());
    expect_exact(g, dense_sum(m2, 2));
  });
}

TEST(ProxyTest, DifferentMasksOnDifferentRanksFallBackToDenseEverywhere) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask(), m2 = test_mask();
  m2.set_range(900, 100, true);
  run_ranks(ranks, [&](Rank& r) {
    const compress::Mask& mine = r.rank == 0 ? m : m2;
    std::vector<float> g = gradient(mine, r.rank);
    publish(r, g.data(), mine);
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0)
        << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
    EXPECT_EQ(r.backend.last_count, kCount);
    EXPECT_EQ(r.proxy.agreement({kComm, g.data(), g.data(), kCount, ElemType::kF32}), Proxy::Agreement::kMismatch);
  });
  EXPECT_EQ(world.mismatches(), 0u) << "a disagreement must never reach NCCL as different counts";
}

TEST(ProxyTest, ARankWithoutTheMaskMakesEveryRankRunDense) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank), elsewhere(32, 0.0f);
    publish(r, r.rank == 0 ? static_cast<void*>(g.data()) : static_cast<void*>(elsewhere.data()),
            r.rank == 0 ? m : compress::Mask(32, false));
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0)
        << r.backend.error;
    EXPECT_EQ(path, Path::kDense);
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

TEST(ProxyTest, GroupsGatherBeforeTheLaunchAndScatterAfter) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> a = gradient(m, r.rank), b = gradient(m, r.rank, 1);
    publish(r, a.data(), m);
    publish(r, b.data(), m);
    // An ungrouped call agrees the masks first; inside a group nothing may wait.
    Path path;
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kDense) << "unchecked masks run dense inside a group";
    ASSERT_EQ(r.proxy.group_end(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    ASSERT_EQ(r.proxy.all_reduce(b.data(), b.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
    refill(a, gradient(m, r.rank));
    refill(b, gradient(m, r.rank, 1));
    r.backend.log.clear();
    ASSERT_EQ(r.proxy.group_start(), 0);
    ASSERT_EQ(r.proxy.all_reduce(a.data(), a.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    ASSERT_EQ(r.proxy.all_reduce(b.data(), b.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(r.backend.scatters, 0 + 2) << "only the two ungrouped compact calls scattered so far";
    ASSERT_EQ(r.proxy.group_end(), 0) << r.backend.error;
    const std::vector<std::string> want = {"gather", "all_reduce", "gather", "all_reduce", "group_end", "scatter", "scatter"};
    EXPECT_EQ(r.backend.log, want);
    expect_exact(a, dense_sum(m, 2));
    expect_exact(b, dense_sum(m, 2, 1));
  });
}

TEST(ProxyTest, GraphCaptureNeverAllocatesOrWaits) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  compress::Mask m = test_mask();
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> g = gradient(m, r.rank);
    publish(r, g.data(), m);
    r.backend.capturing_ = true;
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kDense);
    EXPECT_EQ(r.backend.agrees, 0);
    EXPECT_EQ(r.backend.plans_created, 0);
    r.backend.capturing_ = false;
    refill(g, gradient(m, r.rank));
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    r.backend.capturing_ = true;  // an agreed plan may be captured: it allocates nothing
    refill(g, gradient(m, r.rank));
    ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    expect_exact(g, dense_sum(m, 2));
  });
}

TEST(ProxyTest, APlanACapturedGraphUsesIsNeverFreed) {
  FakeWorld world(1);
  auto ranks = make_ranks(world);
  Rank& r = *ranks[0];
  compress::Mask m = test_mask(), m2 = test_mask();
  m2.set_range(0, 300, false);
  std::vector<float> g = gradient(m, 0), h = gradient(m, 0);
  publish(r, g.data(), m);
  publish(r, h.data(), m);
  const int live_before = testing::FakePlan::live.load();
  for (float* buf : {g.data(), h.data()})
    ASSERT_EQ(r.proxy.all_reduce(buf, buf, kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  ASSERT_EQ(testing::FakePlan::live.load(), live_before + 2);
  r.backend.capturing_ = true;  // g's plan goes into a graph; h's does not
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  r.backend.capturing_ = false;
  publish(r, g.data(), m2);
  publish(r, h.data(), m2);
  for (float* buf : {g.data(), h.data()})
    ASSERT_EQ(r.proxy.all_reduce(buf, buf, kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream), 0);
  // Two new plans; h's old one freed, g's old one kept for the graph's replays.
  EXPECT_EQ(testing::FakePlan::live.load(), live_before + 3);
}

// DDP with gradient_as_bucket_view: one bucket holds several gradients; the pruned ones publish
// their masks, an unpruned one (a bias) publishes nothing and stays dense inside the bucket.
TEST(ProxyTest, ABucketComposedOfPublishedGradientsCompactsToTheirUnion) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  run_ranks(ranks, [&](Rank& r) {
    std::vector<float> bucket(kCount);
    compress::Mask w1(400, false), w2(500, false);
    for (uint64_t i = 0; i < 400; i += 5) w1.set_range(i, 1, true);
    w2.set_range(100, 50, true);
    publish(r, bucket.data(), w1);         // elements [0, 400)
    publish(r, bucket.data() + 400, w2);   // [400, 900); [900, 1000) is an unpublished bias
    compress::Mask whole(kCount, true);
    whole.copy_bits(0, w1, 0, 400);
    whole.copy_bits(400, w2, 0, 500);
    refill(bucket, gradient(whole, r.rank));
    Path path;
    ASSERT_EQ(r.proxy.all_reduce(bucket.data(), bucket.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream,
                                 &path), 0);
    EXPECT_EQ(path, Path::kCompactPublished);
    EXPECT_EQ(r.backend.last_count, w1.kept() + w2.kept() + 100);
    expect_exact(bucket, dense_sum(whole, 2));
  });
}

TEST(ProxyTest, SmallBuffersAndUnsupportedTypesPassThrough) {
  FakeWorld world(1);
  ProxyOptions o;
  o.min_count = 512;
  auto ranks = make_ranks(world, o);
  Rank& r = *ranks[0];
  std::vector<float> g(kCount, 1.0f);
  publish(r, g.data(), test_mask());
  Path path;
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), 100, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kOther, ReduceOp::kSum, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kOther, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kPassThrough);
  EXPECT_EQ(r.backend.agrees, 0);
}

TEST(ProxyTest, DenseMasksAreAgreedButNotCompacted) {
  FakeWorld world(1);
  auto ranks = make_ranks(world);
  Rank& r = *ranks[0];
  compress::Mask almost(kCount, true);
  almost.set_range(0, 10, false);  // density 0.99 > max_density 0.9
  std::vector<float> g = gradient(almost, 0);
  publish(r, g.data(), almost);
  Path path;
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &path), 0);
  EXPECT_EQ(path, Path::kDense);
  EXPECT_EQ(r.backend.plans_created, 0);
}

}  // namespace
}  // namespace sieve::plugin::proxy
