// Learned masks (SIEVE_TRACK=1) on the CPU: the switch to compact happens at a call fixed by the
// stability count and the lag, identically on every rank; a violation sends every rank back to
// dense at the same call, and the dropped values are counted.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "plugin/proxy/proxy.h"
#include "tests/proxy/fake_backend.h"

namespace sieve::plugin::proxy {
namespace {

using testing::FakeBackend;
using testing::FakeWorld;

constexpr uint64_t kCount = 256;
Comm const kComm = reinterpret_cast<Comm>(0x1000);
Stream const kStream = reinterpret_cast<Stream>(0x2000);

struct Rank {
  Rank(FakeWorld& world, int r, ProxyOptions o) : rank(r), backend(world, r), proxy(backend, registry, o, stats) {}
  int rank;
  compress::MaskRegistry registry;
  ProcessStats stats;
  FakeBackend backend;
  Proxy proxy;
};

ProxyOptions tracking(uint32_t stable, uint32_t lag) {
  ProxyOptions o;
  o.track = true;
  o.track_stable = stable;
  o.track_lag = lag;
  o.min_count = 1;
  return o;
}

// Rank r's input: nonzero on even elements below 200 only, so the output keeps 100 of 256.
std::vector<float> input(int rank, int step) {
  std::vector<float> g(kCount, 0.0f);
  for (uint64_t i = 0; i < 200; i += 2) g[i] = float(rank + 1) + float(step) * 0.25f;
  return g;
}

// Runs `steps` calls on every rank; paths[rank][step] records what each call did. `tamper(rank,
// step, g)` may edit a rank's input before its call.
std::vector<std::vector<Path>> run(int nranks, ProxyOptions o, int steps,
                                   std::vector<std::unique_ptr<Rank>>* out_ranks,
                                   const std::function<void(int, int, std::vector<float>&)>& tamper = nullptr,
                                   std::vector<std::vector<std::vector<float>>>* outputs = nullptr) {
  FakeWorld world(nranks);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < nranks; ++r) ranks.push_back(std::make_unique<Rank>(world, r, o));
  std::vector<std::vector<Path>> paths(nranks);
  if (outputs) outputs->assign(nranks, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      Rank& rank = *ranks[r];
      std::vector<float> g;  // same address every step, as DDP's buckets
      for (int s = 0; s < steps; ++s) {
        std::vector<float> fresh = input(r, s);
        if (tamper) tamper(r, s, fresh);
        if (g.empty()) g = fresh; else std::copy(fresh.begin(), fresh.end(), g.begin());
        Path p;
        ASSERT_EQ(rank.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0)
            << rank.backend.error;
        paths[r].push_back(p);
        if (outputs) (*outputs)[r].push_back(g);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(world.mismatches(), 0u);
  if (out_ranks) *out_ranks = std::move(ranks);
  return paths;
}

TEST(LearnedTest, SwitchesToCompactAtTheCallFixedByStabilityAndLag) {
  for (uint32_t lag : {1u, 2u, 4u}) {
    const uint32_t stable = 3;
    std::vector<std::unique_ptr<Rank>> ranks;
    auto paths = run(2, tracking(stable, lag), 12, &ranks);
    // Records of calls 0..K-1 are read at calls lag..K-1+lag; the last of them makes the mask stable.
    const size_t first_compact = stable - 1 + lag;
    for (int r = 0; r < 2; ++r)
      for (size_t s = 0; s < paths[r].size(); ++s)
        EXPECT_EQ(paths[r][s], s < first_compact ? Path::kDense : Path::kCompactLearned)
            << "lag " << lag << " rank " << r << " call " << s;
    EXPECT_EQ(ranks[0]->backend.last_count, 101u) << "100 kept elements and the violation flag";
    EXPECT_EQ(ranks[0]->stats.mask_violations.load(), 0u);
  }
}

TEST(LearnedTest, CompactResultsEqualDenseResults) {
  std::vector<std::vector<std::vector<float>>> outputs;
  run(3, tracking(2, 2), 10, nullptr, nullptr, &outputs);
  for (int s = 0; s < 10; ++s) {
    std::vector<float> want(kCount, 0.0f);
    for (int r = 0; r < 3; ++r) {
      std::vector<float> g = input(r, s);
      for (uint64_t i = 0; i < kCount; ++i) want[i] += g[i];
    }
    for (int r = 0; r < 3; ++r) EXPECT_EQ(outputs[r][s], want) << "rank " << r << " call " << s;
  }
}

TEST(LearnedTest, AViolationOnOneRankSendsEveryRankBackToDenseAtTheSameCall) {
  const uint32_t stable = 2, lag = 2;
  const int violating_call = 6;  // compact from call 3 on
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::vector<std::vector<float>>> outputs;
  auto paths = run(2, tracking(stable, lag), 16, &ranks,
                   [&](int rank, int step, std::vector<float>& g) {
                     if (rank == 1 && step == violating_call) { g[201] = 5.0f; g[203] = -2.0f; }
                   },
                   &outputs);
  for (int r = 0; r < 2; ++r) {
    for (int s = 3; s < violating_call + int(lag); ++s) EXPECT_EQ(paths[r][s], Path::kCompactLearned) << s;
    // The flag of the violating call is read `lag` calls later: dense from there, relearning.
    EXPECT_EQ(paths[r][violating_call + lag], Path::kDense) << "rank " << r;
    // Relearning: `stable` observations read after `lag` more calls.
    EXPECT_EQ(paths[r][violating_call + lag + stable - 1 + lag], Path::kCompactLearned) << "rank " << r;
    // What happened to the violating values: dropped (exact zero) in the compact call that had them.
    EXPECT_EQ(outputs[r][violating_call][201], 0.0f);
    EXPECT_EQ(outputs[r][violating_call][203], 0.0f);
  }
  EXPECT_EQ(ranks[1]->stats.mask_violations.load(), 2u) << "the violating rank counts its dropped values";
  EXPECT_EQ(ranks[0]->stats.mask_violations.load(), 0u);
}

TEST(LearnedTest, PublishedMasksTakePrecedenceAndCaptureStaysDense) {
  FakeWorld world(1);
  Rank r(world, 0, tracking(1, 1));
  std::vector<float> g = input(0, 0);
  r.backend.capturing_ = true;
  Path p;
  ASSERT_EQ(r.proxy.all_reduce(g.data(), g.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream, &p), 0);
  EXPECT_EQ(p, Path::kDense);
  EXPECT_EQ(r.backend.plans_created, 0);
  EXPECT_TRUE(std::find(r.backend.log.begin(), r.backend.log.end(), "record_nonzero") == r.backend.log.end())
      << "a captured call leaves no record (it replays without the proxy)";
}

TEST(FlagEncodingTest, TheReducedFlagReportsAnyViolatingRankForEveryOpAndType) {
  // Reduce {ok, ok, bad} and {ok, ok, ok} with each op in double, then encode the result in each type.
  for (ElemType type : {ElemType::kF32, ElemType::kF16, ElemType::kBF16, ElemType::kF64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
      FlagEncoding e = flag_encoding(type, op);
      auto value = [&](uint64_t bits) {  // +-1 or 0 in every type
        const uint64_t sign = 1ull << (element_size(type) * 8 - 1);
        return (bits & ~sign) == 0 ? 0.0 : ((bits & sign) ? -1.0 : 1.0);
      };
      auto reduce = [&](std::vector<double> v) {
        double acc = v[0];
        for (size_t i = 1; i < v.size(); ++i) {
          if (op == ReduceOp::kProd) acc *= v[i];
          else if (op == ReduceOp::kMax) acc = std::max(acc, v[i]);
          else if (op == ReduceOp::kMin) acc = std::min(acc, v[i]);
          else acc += v[i];
        }
        return op == ReduceOp::kAvg ? acc / double(v.size()) : acc;
      };
      auto encode = [&](double v) -> uint64_t {  // only zero versus nonzero matters to the check
        return v == 0.0 ? 0 : (e.ok_bits | e.bad_bits);
      };
      const double ok = value(e.ok_bits), bad = value(e.bad_bits);
      EXPECT_FALSE(flag_reports_violation(e, type, encode(reduce({ok, ok, ok}))))
          << elem_type_name(type) << " " << reduce_op_name(op);
      EXPECT_TRUE(flag_reports_violation(e, type, encode(reduce({ok, bad, ok}))))
          << elem_type_name(type) << " " << reduce_op_name(op);
    }
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
