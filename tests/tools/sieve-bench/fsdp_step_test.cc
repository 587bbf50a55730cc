// SPDX-License-Identifier: Apache-2.0
// An FSDP step's collectives over in-process fake links, every rank a thread: dense, compacted
// (each shard compacted and padded to the largest shard's kept count, as the proxy does) and
// codec; compacted equals the dense run of the pruned model bit for bit; what each rank sends is
// 2 (N-1) x the shard (dense) or 2 (N-1) x K (compacted); a rank with another mask is caught.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tests/tools/sieve-bench/fake_ring_link.h"
#include "tools/sieve-bench/fsdp_step.h"
#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {
namespace {

using fake_ring::FakeChannel;
using fake_ring::FakeLink;

// Uneven rows, a parameter with fewer rows than ranks, a root parameter registered after a block,
// a group of norms only (kept whole: the proxy leaves it dense), a shard of padding only.
Model mini() {
  Model model{"mini", "Mini", {}};
  model.params = {{"embed.weight", {37, 16}, ParamRole::LinearWeight},
                  {"blocks.0.fc.weight", {30, 20}, ParamRole::LinearWeight},
                  {"blocks.0.fc.bias", {30}, ParamRole::Bias},
                  {"blocks.0.norm.weight", {30}, ParamRole::Bias},
                  {"token", {1, 1, 24}, ParamRole::Bias},
                  {"blocks.1.fc.weight", {9, 50}, ParamRole::LinearWeight},
                  {"blocks.2.norm.weight", {64}, ParamRole::Bias},
                  {"head.weight", {10, 16}, ParamRole::LinearWeight},
                  {"head.bias", {10}, ParamRole::Bias}};
  return model;
}

// The proxy's thresholds, lowered so this small model's groups compact.
constexpr ProxyRules kSmallBuffers{1, 0.9};

RingOptions options() {
  RingOptions o;
  o.chunk_bytes = 96;  // several chunks per shard, shards not a multiple of the chunk
  o.max_inflight = 3;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  return o;
}

struct Ranks {
  std::vector<std::unique_ptr<FsdpStep>> steps;
  std::vector<FsdpStepResult> results;
  std::vector<std::string> checks;
};

// One workload per rank (the same one, unless a test gives a rank another mask).
Ranks run_step(const std::vector<const FsdpWorkload*>& work, Mode mode, DType type, int iterations = 2) {
  const int nranks = static_cast<int>(work.size());
  Ranks ranks;
  ranks.results.resize(nranks);
  ranks.checks.resize(nranks);
  std::vector<FakeChannel> channels(nranks);
  for (int r = 0; r < nranks; ++r) {
    ranks.steps.push_back(std::make_unique<FsdpStep>(*work[r], mode, r, type));
    EXPECT_EQ(ranks.steps.back()->allocate(), "");
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      FakeLink link(channels[r], channels[(r + nranks - 1) % nranks], 300 + r);
      const RingOptions ring = options();
      std::vector<char> scratch(scratch_bytes(ring));
      for (int it = 0; it < iterations; ++it) {
        ranks.steps[r]->fill(static_cast<uint64_t>(it));
        ranks.results[r] = ranks.steps[r]->run(link, scratch.data(), ring);
        if (!ranks.results[r].error.empty()) return;
        ranks.checks[r] = ranks.steps[r]->check(static_cast<uint64_t>(it));
      }
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

size_t expected_bytes(const FsdpWorkload& work, Mode mode, DType type) {
  size_t elements = 0;
  for (size_t g = 0; g < work.groups.size(); ++g) {
    const bool compacted = mode == Mode::Compacted && work.compaction[g].compacts;
    elements += compacted ? work.compaction[g].width : work.groups[g].shard_elements;
  }
  return 2 * static_cast<size_t>(work.nranks - 1) * elements * dtype_size(type);
}

TEST(FsdpStep, EveryModeExactForEveryRankCount) {
  const Model model = mini();
  const auto keep = prune_parameters(model, {PruneKind::Unstructured, 0.3, 9});
  for (int nranks : {1, 2, 3, 4, 5}) {
    const FsdpWorkload work = make_fsdp_workload(model, nranks, keep, kSmallBuffers);
    for (DType type : {DType::kF32, DType::kBF16}) {
      for (Mode mode : {Mode::Dense, Mode::Compacted, Mode::Codec}) {
        SCOPED_TRACE(std::to_string(nranks) + " ranks, " + dtype_label(type) + ", " + mode_name(mode));
        const Ranks ranks = run_step(std::vector<const FsdpWorkload*>(nranks, &work), mode, type);
        for (int r = 0; r < nranks; ++r) {
          ASSERT_EQ(ranks.results[r].error, "") << "rank " << r;
          EXPECT_EQ(ranks.checks[r], "") << "rank " << r;
          EXPECT_EQ(ranks.results[r].bytes_sent, expected_bytes(work, mode, type)) << "rank " << r;
        }
      }
    }
  }
}

// The test covers what it claims: padding to K is used, and one group is left dense.
TEST(FsdpStep, TheWorkloadHasUnevenShardsAndADenseGroup) {
  const Model model = mini();
  const FsdpWorkload work =
      make_fsdp_workload(model, 4, prune_parameters(model, {PruneKind::Unstructured, 0.3, 9}), kSmallBuffers);
  ASSERT_EQ(work.groups.size(), 4u);  // root, blocks.0, blocks.1, blocks.2
  bool uneven = false;
  for (const ShardCompaction& c : work.compaction) {
    uneven = uneven || (c.compacts && *std::min_element(c.kept.begin(), c.kept.end()) < c.width);
  }
  EXPECT_TRUE(uneven);
  EXPECT_TRUE(work.compaction[1].compacts && work.compaction[2].compacts);
  EXPECT_FALSE(work.compaction[3].compacts);  // norms only: every element kept
  EXPECT_EQ(work.compaction[2].kept[3], 0u);  // blocks.1's 9 rows: rank 3 holds padding only
}

TEST(FsdpStep, CompactedEqualsTheDenseRunOfThePrunedModelBitForBit) {
  const Model model = mini();
  const FsdpWorkload work =
      make_fsdp_workload(model, 3, prune_parameters(model, {PruneKind::Channel, 0.4, 4}), kSmallBuffers);
  for (DType type : {DType::kF32, DType::kBF16}) {
    const std::vector<const FsdpWorkload*> same(3, &work);
    const Ranks compacted = run_step(same, Mode::Compacted, type, 1);
    const Ranks whole = run_step(same, Mode::Codec, type, 1);  // the pruned model's buffers sent whole
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(compacted.results[r].error, "");
      ASSERT_EQ(whole.results[r].error, "");
      for (size_t g = 0; g < work.groups.size(); ++g) {
        const size_t elem = dtype_size(type), shard = work.groups[g].shard_elements;
        EXPECT_EQ(std::memcmp(compacted.steps[r]->parameters(g), whole.steps[r]->parameters(g), 3 * shard * elem), 0)
            << "rank " << r << ", group " << g;
        EXPECT_EQ(std::memcmp(compacted.steps[r]->gradient_shard(g), whole.steps[r]->gradient_shard(g), shard * elem),
                  0)
            << "rank " << r << ", group " << g;
      }
    }
  }
}

// A rank whose mask keeps another element of the same shard (same counts, so nothing else notices)
// puts values at the wrong places: the checks must say so.
TEST(FsdpStep, ARankWithAnotherMaskIsCaught) {
  const Model model = mini();
  auto keep = prune_parameters(model, {PruneKind::Unstructured, 0.3, 9});
  const FsdpWorkload work = make_fsdp_workload(model, 2, keep, kSmallBuffers);
  std::vector<uint8_t>& embed = keep[0];  // root group, rank 0's rows: swap a kept and a pruned element
  const size_t kept = static_cast<size_t>(std::find(embed.begin(), embed.end(), 1) - embed.begin());
  const size_t pruned = static_cast<size_t>(std::find(embed.begin(), embed.end(), 0) - embed.begin());
  ASSERT_LT(std::max(kept, pruned), 19u * 16);  // both in rank 0's chunk of 19 rows
  std::swap(embed[kept], embed[pruned]);
  const FsdpWorkload other = make_fsdp_workload(model, 2, keep, kSmallBuffers);
  ASSERT_EQ(other.compaction[0].width, work.compaction[0].width);
  const Ranks ranks = run_step({&work, &other}, Mode::Compacted, DType::kF32, 1);
  ASSERT_EQ(ranks.results[0].error, "");
  ASSERT_EQ(ranks.results[1].error, "");
  EXPECT_NE(ranks.checks[0].find("group 0 (root)"), std::string::npos) << ranks.checks[0];
  EXPECT_NE(ranks.checks[1].find("all-gather of group 0 (root), shard 0"), std::string::npos) << ranks.checks[1];
}

}  // namespace
}  // namespace sieve::bench
