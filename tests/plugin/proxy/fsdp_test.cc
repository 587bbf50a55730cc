// SPDX-License-Identifier: Apache-2.0
// FSDP's pattern on the CPU: every step allocates fresh buffers for its all-gathers (parameters)
// and reduce-scatters (gradients), so masks name collectives, not addresses. Emulated as FSDP2 lays
// them out: each parameter sharded along its first dimension, each shard padded to the same length,
// a group's buffer rank-major (rank 0's shards of every parameter, then rank 1's, ...). Compacted
// results must equal a dense run's bit for bit, in fp32 and bf16, with a pre-multiplied sum (FSDP's
// averaged reduce), uneven shards, padding, a step that skips a parameter, and identical layers
// pruned differently (they run dense: no call can say which of their masks is its own).
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "plugin/sieve.h"
#include "tests/plugin/proxy/rank_harness.h"

namespace sieve::plugin::proxy {
namespace {

using namespace testing;

struct Param {
  uint64_t numel;
  compress::Mask mask;  // kept = not pruned
};

// One FSDP parameter group on n ranks.
struct Group {
  std::vector<Param> params;
  int n = 2;
  uint64_t shard(const Param& p) const { return (p.numel + uint64_t(n) - 1) / uint64_t(n); }  // padded
  uint64_t per_rank(const std::vector<bool>& present) const {
    uint64_t total = 0;
    for (size_t k = 0; k < params.size(); ++k) total += present[k] ? shard(params[k]) : 0;
    return total;
  }
  // The group buffer's mask: rank-major shards; padding is pruned (never read back).
  compress::Mask mask(const std::vector<bool>& present) const {
    const uint64_t width = per_rank(present);
    compress::Mask m(width * uint64_t(n), false);
    for (int r = 0; r < n; ++r) {
      uint64_t at = uint64_t(r) * width;
      for (size_t k = 0; k < params.size(); ++k) {
        if (!present[k]) continue;
        const Param& p = params[k];
        for (uint64_t j = 0; j < shard(p); ++j) {
          const uint64_t element = uint64_t(r) * shard(p) + j;
          if (element < p.numel && p.mask.test(element)) m.set_range(at + j, 1, true);
        }
        at += shard(p);
      }
    }
    return m;
  }
};

std::vector<Group> model(int n) {
  std::mt19937_64 rng(11);
  std::vector<Group> groups;
  for (std::vector<uint64_t> sizes : {std::vector<uint64_t>{301, 37}, {257, 129, 5}, {301, 37}}) {
    Group g;
    g.n = n;
    for (uint64_t numel : sizes) {
      compress::Mask m(numel, false);
      for (uint64_t i = 0; i < numel; ++i)
        if (rng() % 5 == 0 || numel < 10) m.set_range(i, 1, true);  // 80 % pruned; tiny ones kept
      g.params.push_back(Param{numel, m});
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// A value where the mask keeps (exact in bf16: small integers and halves), zero where it prunes.
template <typename T> T element(DType type, bool kept, int rank, uint64_t i, int step) {
  const float v = kept ? float(rank + 1) + float((i + uint64_t(step)) % 7) * 0.5f : 0.0f;
  if constexpr (sizeof(T) == 4) {
    (void)type;
    return v;
  } else {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return uint16_t(bits >> 16);  // bf16: these values are exact
  }
}

// What every rank gets from `steps` steps of FSDP on `groups`, with or without Sieve.
struct Outputs {
  std::vector<std::vector<std::vector<unsigned char>>> by_rank;  // [rank][call] bytes
  std::vector<std::vector<Path>> paths;                          // [rank][call]
};

template <typename T> Outputs train(int n, DType type, bool sieve, int steps, int skip_step) {
  const std::vector<Group> groups = model(n);
  const std::vector<bool> all(8, true);
  FakeWorld world(n);
  auto ranks = make_ranks(world);
  Outputs out;
  out.by_rank.resize(size_t(n));
  out.paths.resize(size_t(n));
  const compress::DType dtype = type == DType::kF32 ? compress::DType::kF32 : compress::DType::kBF16;
  run_ranks(ranks, [&](Rank& r) {
    // FSDP's averaged reduce: a pre-multiplied sum by 1/n, created on the communicator.
    const int32_t avg = world.create_premul_sum(r.rank, 1.0 / n);
    r.proxy.premul_sum_created(kComm, avg);
    if (sieve) {
      // In the order the job issues them: all-gathers forward, reduce-scatters backward.
      for (const Group& g : groups) {
        const compress::Mask m = g.mask(all);
        ASSERT_TRUE(r.registry
                        .publish_collective(compress::Collective::kAllGather, dtype,
                                            std::make_shared<const compress::Mask>(m), nullptr)
                        .ok());
      }
      for (auto g = groups.rbegin(); g != groups.rend(); ++g)
        ASSERT_TRUE(r.registry
                        .publish_collective(compress::Collective::kReduceScatter, dtype,
                                            std::make_shared<const compress::Mask>(g->mask(all)), nullptr)
                        .ok());
      EXPECT_EQ(r.commit().state, CommitOutcome::State::kActivated);
    }
    auto record = [&](const void* data, uint64_t count, Path path) {
      const auto* bytes = static_cast<const unsigned char*>(data);
      out.by_rank[size_t(r.rank)].emplace_back(bytes, bytes + count * sizeof(T));
      out.paths[size_t(r.rank)].push_back(path);
    };
    for (int step = 0; step < steps; ++step) {
      for (const Group& g : groups) {  // forward: gather each group's parameters into a fresh buffer
        const uint64_t width = g.per_rank(all);
        const compress::Mask m = g.mask(all);
        std::vector<T> shard(width), full(width * uint64_t(n));
        for (uint64_t j = 0; j < width; ++j)
          shard[j] = element<T>(type, m.test(uint64_t(r.rank) * width + j), r.rank, j, step);
        Path path;
        ASSERT_EQ(r.settle(r.proxy.all_gather(shard.data(), full.data(), width, type, kComm, kStream, &path)), 0)
            << r.backend.error;
        record(full.data(), full.size(), path);
      }
      for (auto gi = groups.rbegin(); gi != groups.rend(); ++gi) {  // backward: reduce-scatter gradients
        std::vector<bool> present = all;
        if (step == skip_step && gi == groups.rbegin() + 1) present[1] = false;  // a parameter without a gradient
        const uint64_t width = gi->per_rank(present);
        const compress::Mask m = gi->mask(present);
        std::vector<T> grads(width * uint64_t(n)), mine(width);
        for (uint64_t i = 0; i < grads.size(); ++i) grads[i] = element<T>(type, m.test(i), r.rank, i, step);
        Path path;
        ASSERT_EQ(r.settle(r.proxy.reduce_scatter(grads.data(), mine.data(), width, type, premul_sum(avg), kComm,
                                                  kStream, &path)),
                  0)
            << r.backend.error;
        record(mine.data(), mine.size(), path);
      }
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
  return out;
}

template <typename T> void expect_fsdp_compacts_exactly(DType type) {
  for (int n : {2, 3, 4}) {
    const int steps = 3, skip = 1;
    const Outputs dense = train<T>(n, type, false, steps, skip);
    const Outputs sieve = train<T>(n, type, true, steps, skip);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(sieve.by_rank[size_t(r)].size(), dense.by_rank[size_t(r)].size());
      for (size_t c = 0; c < dense.by_rank[size_t(r)].size(); ++c)
        EXPECT_EQ(sieve.by_rank[size_t(r)][c], dense.by_rank[size_t(r)][c])
            << dtype_name(type) << ", " << n << " ranks, rank " << r << ", call " << c;
      // Per step: 3 all-gathers (groups 0, 1, 2), 3 reduce-scatters (groups 2, 1, 0). Groups 0 and 2
      // share a shape with different masks: no call of that shape can say which is its own, so those
      // run dense. The skipping step's group-1 reduce-scatter has a shape no mask names: dense too.
      for (size_t c = 0; c < sieve.paths[size_t(r)].size(); ++c) {
        const bool skipped = c == size_t(skip) * 6 + 4, ambiguous = c % 6 != 1 && c % 6 != 4;
        EXPECT_EQ(sieve.paths[size_t(r)][c], skipped || ambiguous ? Path::kDense : Path::kCompactPublished)
            << "call " << c;
      }
    }
  }
}

TEST(FsdpTest, FreshBuffersEveryStepCompactExactlyInF32) { expect_fsdp_compacts_exactly<float>(DType::kF32); }
TEST(FsdpTest, FreshBuffersEveryStepCompactExactlyInBf16) { expect_fsdp_compacts_exactly<uint16_t>(DType::kBF16); }

// Two reduce-scatter masks of one shape (identical layers pruned differently), and a step that skips
// one of those collectives: no call of that shape can say which mask is its own,
// so every call of it runs dense, on every rank, and every result is the dense one. Before, calls
// took the masks in publish order, round and round, and the skip shifted every later step onto its
// neighbour's mask: 75 of 200 elements wrong on every step after, on every rank alike.
TEST(FsdpTest, ASkippedCollectiveNeverShiftsMasks) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  const uint64_t count = 200;
  compress::Mask a(count, false), b(count, false);
  for (uint64_t i = 0; i < count; i += 4) a.set_range(i, 1, true);
  for (uint64_t i = 1; i < count; i += 2) b.set_range(i, 1, true);
  LogCapture log;
  run_ranks(ranks, [&](Rank& r) {
    for (const compress::Mask* m : {&a, &b})
      ASSERT_TRUE(r.registry
                      .publish_collective(compress::Collective::kReduceScatter, compress::DType::kF32,
                                          std::make_shared<const compress::Mask>(*m), nullptr)
                      .ok());
    r.commit();
    for (int step = 0; step < 4; ++step)
      for (int layer = 0; layer < 2; ++layer) {
        if (step == 1 && layer == 0) continue;  // a step whose first layer has no gradient
        const compress::Mask& m = layer == 0 ? a : b;
        std::vector<float> grads(count), mine(count / 2);
        for (uint64_t i = 0; i < count; ++i) grads[i] = m.test(i) ? float(r.rank + 1 + step) : 0.0f;
        Path path;
        ASSERT_EQ(r.settle(r.proxy.reduce_scatter(grads.data(), mine.data(), count / 2, DType::kF32, ReduceOp::kSum,
                                                  kComm, kStream, &path)),
                  0);
        EXPECT_EQ(path, Path::kDense) << "step " << step << " layer " << layer;
        for (uint64_t j = 0; j < count / 2; ++j) {
          const uint64_t i = uint64_t(r.rank) * (count / 2) + j;
          ASSERT_EQ(mine[j], m.test(i) ? float(3 + 2 * step) : 0.0f) << "step " << step << " element " << j;
        }
      }
  });
  EXPECT_EQ(world.mismatches(), 0u);
  EXPECT_EQ(log.count("cannot say which one is its own"), 2u) << "once per rank";
}

// Masks of one shape that are all equal identify every call of it for certain: they compact.
TEST(FsdpTest, EqualMasksOfOneShapeCompact) {
  FakeWorld world(2);
  auto ranks = make_ranks(world);
  const uint64_t count = 200;
  compress::Mask a(count, false);
  for (uint64_t i = 0; i < count; i += 4) a.set_range(i, 1, true);
  run_ranks(ranks, [&](Rank& r) {
    for (int layer = 0; layer < 3; ++layer)
      ASSERT_TRUE(r.registry
                      .publish_collective(compress::Collective::kReduceScatter, compress::DType::kF32,
                                          std::make_shared<const compress::Mask>(a), nullptr)
                      .ok());
    r.commit();
    for (int call = 0; call < 5; ++call) {
      std::vector<float> grads(count), mine(count / 2);
      for (uint64_t i = 0; i < count; ++i) grads[i] = a.test(i) ? float(r.rank + 1 + call) : 0.0f;
      Path path;
      ASSERT_EQ(r.settle(r.proxy.reduce_scatter(grads.data(), mine.data(), count / 2, DType::kF32, ReduceOp::kSum,
                                                kComm, kStream, &path)),
                0);
      EXPECT_EQ(path, Path::kCompactPublished);
      EXPECT_EQ(r.backend.last_count, 25u);
      for (uint64_t j = 0; j < count / 2; ++j)
        ASSERT_EQ(mine[j], a.test(uint64_t(r.rank) * (count / 2) + j) ? float(3 + 2 * call) : 0.0f);
    }
  });
  EXPECT_EQ(world.mismatches(), 0u);
}

}  // namespace
}  // namespace sieve::plugin::proxy
