// SPDX-License-Identifier: Apache-2.0
// FSDP's groups, its dim-0 sharding with padding, and the proxy's shard compaction, checked against
// numbers worked out by hand from torch.chunk's rule and the proxy's.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tools/sieve-bench/fsdp_layout.h"
#include "tools/sieve-bench/fsdp_step.h"
#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {
namespace {

// Root parameters before, between and after two blocks; shapes that do not split evenly over 4.
Model tiny() {
  Model model{"tiny", "Tiny", {}};
  model.params = {{"stem.weight", {10, 3}, ParamRole::LinearWeight},
                  {"blocks.0.fc.weight", {6, 5}, ParamRole::LinearWeight},
                  {"blocks.0.fc.bias", {6}, ParamRole::Bias},
                  {"token", {1, 1, 8}, ParamRole::Bias},
                  {"blocks.1.fc.weight", {5, 4}, ParamRole::LinearWeight},
                  {"head.bias", {5}, ParamRole::Bias}};
  return model;
}

TEST(FsdpUnit, TheBlockAParameterBelongsTo) {
  EXPECT_EQ(fsdp_unit_of("layer1.0.conv1.weight"), "layer1.0");
  EXPECT_EQ(fsdp_unit_of("layer4.2.downsample.0.weight"), "layer4.2");
  EXPECT_EQ(fsdp_unit_of("features.12.bias"), "features.12");
  EXPECT_EQ(fsdp_unit_of("encoder.layers.encoder_layer_11.mlp.0.weight"), "encoder.layers.encoder_layer_11");
  EXPECT_EQ(fsdp_unit_of("model.layers.7.self_attn.q_proj.weight"), "model.layers.7");
  // The root's: no numbered module on the way (a digit inside a name is not an index).
  EXPECT_EQ(fsdp_unit_of("conv1.weight"), "");
  EXPECT_EQ(fsdp_unit_of("encoder.pos_embedding"), "");
  EXPECT_EQ(fsdp_unit_of("class_token"), "");
  EXPECT_EQ(fsdp_unit_of("heads.head.bias"), "");
  EXPECT_EQ(fsdp_unit_of("embed_2"), "");  // the tensor's own name never makes a group
}

TEST(FsdpGroups, RootFirstThenBlocksEachParameterOnce) {
  const std::vector<FsdpGroup> groups = fsdp_groups(tiny(), 4);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].name, "");
  EXPECT_EQ(groups[1].name, "blocks.0");
  EXPECT_EQ(groups[2].name, "blocks.1");
  auto params_of = [](const FsdpGroup& g) {
    std::vector<size_t> indices;
    for (const ShardedParam& p : g.params) indices.push_back(p.param);
    return indices;
  };
  EXPECT_EQ(params_of(groups[0]), (std::vector<size_t>{0, 3, 5}));
  EXPECT_EQ(params_of(groups[1]), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(params_of(groups[2]), (std::vector<size_t>{4}));
}

TEST(FsdpGroups, ShardsAreTorchChunksPaddedToEqualLength) {
  const std::vector<FsdpGroup> groups = fsdp_groups(tiny(), 4);
  const FsdpGroup& root = groups[0];
  // stem [10, 3]: 3 rows each (3, 3, 3, 1 real); token [1, 1, 8]: 1 row (1, 0, 0, 0);
  // head.bias [5]: 2 rows (2, 2, 1, 0).
  EXPECT_EQ(root.params[0].chunk_rows, 3u);
  EXPECT_EQ(root.params[0].offset, 0u);
  EXPECT_EQ(root.params[1].offset, 9u);
  EXPECT_EQ(root.params[2].offset, 17u);
  EXPECT_EQ(root.shard_elements, 19u);
  EXPECT_EQ(root.buffer_elements(4), 76u);
  const std::vector<size_t> stem_rows{3, 3, 3, 1}, token_rows{1, 0, 0, 0}, head_rows{2, 2, 1, 0};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(root.params[0].real_rows(r), stem_rows[r]);
    EXPECT_EQ(root.params[1].real_rows(r), token_rows[r]);
    EXPECT_EQ(root.params[2].real_rows(r), head_rows[r]);
  }
  EXPECT_EQ(groups[1].shard_elements, 12u);  // fc.weight 2 rows of 5, fc.bias 2 rows
  EXPECT_EQ(groups[2].shard_elements, 8u);   // 2 rows of 4 (the last rank: padding only)
  // Real elements per shard of the root: 9 + 8 + 2, 9 + 2, 9 + 1, 3.
  const std::vector<uint8_t> mask = fsdp_buffer_mask(root, 4, nullptr);
  const std::vector<size_t> real{19, 11, 10, 3};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(static_cast<size_t>(std::count(mask.begin() + 19 * r, mask.begin() + 19 * (r + 1), 1)), real[r]) << r;
  }
}

// Every element of every parameter lands at one place of its group's buffer: rank r = row / c,
// then the parameter's offset in the shard, then its row within the chunk.
TEST(FsdpGroups, EveryElementLandsWhereTorchChunkPutsIt) {
  const Model model = tiny();
  for (int nranks : {1, 2, 3, 4, 7}) {
    const std::vector<FsdpGroup> groups = fsdp_groups(model, nranks);
    for (const FsdpGroup& group : groups) {
      for (const ShardedParam& piece : group.params) {
        const size_t count = static_cast<size_t>(model.params[piece.param].elements());
        for (size_t e = 0; e < count; ++e) {
          std::vector<std::vector<uint8_t>> keep;
          for (const Param& p : model.params) keep.emplace_back(static_cast<size_t>(p.elements()), 0);
          keep[piece.param][e] = 1;
          const std::vector<uint8_t> mask = fsdp_buffer_mask(group, nranks, &keep);
          const size_t row = e / piece.row_elements, rank = row / piece.chunk_rows;
          const size_t expected = rank * group.shard_elements + piece.offset +
                                  (row % piece.chunk_rows) * piece.row_elements + e % piece.row_elements;
          ASSERT_EQ(std::count(mask.begin(), mask.end(), 1), 1);
          ASSERT_EQ(static_cast<size_t>(std::find(mask.begin(), mask.end(), 1) - mask.begin()), expected)
              << model.params[piece.param].name << " element " << e << ", " << nranks << " ranks";
        }
      }
    }
  }
  // The same, three places worked out by hand (4 ranks, root shard 19 elements).
  const FsdpGroup root = fsdp_groups(model, 4)[0];
  auto place = [&](size_t param, size_t element) {
    std::vector<std::vector<uint8_t>> keep;
    for (const Param& p : model.params) keep.emplace_back(static_cast<size_t>(p.elements()), 0);
    keep[param][element] = 1;
    const std::vector<uint8_t> mask = fsdp_buffer_mask(root, 4, &keep);
    return static_cast<size_t>(std::find(mask.begin(), mask.end(), 1) - mask.begin());
  };
  EXPECT_EQ(place(0, 29), 3u * 19 + 0 + 2);  // stem row 9, column 2: rank 3's first row
  EXPECT_EQ(place(3, 5), 0u * 19 + 9 + 5);   // token: all on rank 0
  EXPECT_EQ(place(5, 4), 2u * 19 + 17 + 0);  // head.bias row 4: rank 2's first row
}

TEST(FsdpGroups, KnownModels) {
  struct Expected {
    const char* model;
    size_t groups;
    const char* first_block;
  };
  for (const Expected& e : {Expected{"resnet18", 9, "layer1.0"}, Expected{"resnet50", 17, "layer1.0"},
                            Expected{"vit_b_16", 13, "encoder.layers.encoder_layer_0"}}) {
    const Model model = *make_model(e.model);
    const std::vector<FsdpGroup> groups = fsdp_groups(model, 4);
    ASSERT_EQ(groups.size(), e.groups) << e.model;
    EXPECT_EQ(groups[0].name, "") << e.model;
    EXPECT_EQ(groups[1].name, e.first_block) << e.model;
    std::vector<int> seen(model.params.size(), 0);
    size_t real = 0;
    for (const FsdpGroup& g : groups) {
      for (const ShardedParam& p : g.params) ++seen[p.param];
      const std::vector<uint8_t> mask = fsdp_buffer_mask(g, 4, nullptr);
      real += static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << e.model;
    EXPECT_EQ(real, static_cast<size_t>(model.elements())) << e.model;
  }
  // VGG19: every layer is an entry of features or classifier, so no root group.
  const std::vector<FsdpGroup> vgg = fsdp_groups(*make_model("vgg19"), 4);
  ASSERT_EQ(vgg.size(), 19u);
  EXPECT_EQ(vgg.front().name, "features.0");
  EXPECT_EQ(vgg.back().name, "classifier.6");
  // ResNet-50's rows (64 ... 2048 channels, fc's 1000) split evenly over 4 ranks, not over 3.
  const Model resnet50 = *make_model("resnet50");
  size_t over4 = 0, over3 = 0;
  for (const FsdpGroup& g : fsdp_groups(resnet50, 4)) over4 += g.buffer_elements(4);
  for (const FsdpGroup& g : fsdp_groups(resnet50, 3)) over3 += g.buffer_elements(3);
  EXPECT_EQ(over4, static_cast<size_t>(resnet50.elements()));
  EXPECT_GT(over3, static_cast<size_t>(resnet50.elements()));
}

std::vector<uint8_t> shards(std::vector<std::pair<size_t, size_t>> kept_of_size) {
  std::vector<uint8_t> mask;
  for (auto [size, kept] : kept_of_size) {
    for (size_t i = 0; i < size; ++i) mask.push_back(i % 3 == 0 && i / 3 < kept ? 1 : 0);
  }
  return mask;
}

TEST(ShardCompaction, EveryShardPaddedToTheLargestKeptCount) {
  // Two shards of 12000: 2000 and 3000 kept (every third element, from the start).
  const ShardCompaction c = shard_compaction(shards({{12000, 2000}, {12000, 3000}}), 2);
  EXPECT_EQ(c.kept, (std::vector<size_t>{2000, 3000}));
  EXPECT_EQ(c.width, 3000u);
  EXPECT_TRUE(c.compacts);
  EXPECT_EQ(c.moved_elements(24000), 6000u);  // N x K, not the 5000 kept
}

TEST(ShardCompaction, TheProxysRulesLeaveSomeBuffersDense) {
  // Below SIEVE_PROXY_MIN_COUNT (16384 elements).
  EXPECT_FALSE(shard_compaction(shards({{8000, 100}, {8000, 100}}), 2).compacts);
  EXPECT_TRUE(shard_compaction(shards({{8000, 100}, {8000, 100}}), 2, ProxyRules{1000, 0.9}).compacts);
  // Above SIEVE_PROXY_MAX_DENSITY (0.9): one dense shard makes K the whole shard.
  std::vector<uint8_t> mask(40000, 0);
  std::fill(mask.begin(), mask.begin() + 20000, 1);
  const ShardCompaction lopsided = shard_compaction(mask, 2);
  EXPECT_EQ(lopsided.width, 20000u);
  EXPECT_FALSE(lopsided.compacts);
  EXPECT_EQ(lopsided.moved_elements(40000), 40000u);
  // Nothing kept: the proxy has nothing to compact with and runs it dense.
  EXPECT_FALSE(shard_compaction(std::vector<uint8_t>(40000, 0), 2).compacts);
  // A buffer that does not split into equal shards is no FSDP buffer.
  EXPECT_FALSE(shard_compaction(std::vector<uint8_t>(40001, 1), 2).compacts);
}

TEST(FsdpWorkload, TotalsAddUp) {
  const Model model = *make_model("resnet50");
  const auto keep = prune_parameters(model, {PruneKind::Unstructured, 0.2, 1});
  const FsdpWorkload work = make_fsdp_workload(model, 4, keep);
  size_t kept = 0;
  for (const auto& k : keep) kept += static_cast<size_t>(std::count(k.begin(), k.end(), 1));
  EXPECT_EQ(work.kept_elements(), kept);
  EXPECT_EQ(work.buffer_elements(), static_cast<size_t>(model.elements()));
  EXPECT_EQ(work.groups_compacted(), work.groups.size());
  size_t moved = 0;
  for (size_t g = 0; g < work.groups.size(); ++g) moved += 4 * work.compaction[g].width;
  EXPECT_EQ(work.compacted_elements(), moved);
  // Padding to the largest shard costs little for unstructured pruning: within 1 % of the kept.
  EXPECT_GE(work.compacted_elements(), kept);
  EXPECT_LT(static_cast<double>(work.compacted_elements()), 1.01 * static_cast<double>(kept));
}

TEST(Pruning, PerParameterMasksAreTheBucketsMasks) {
  const Model model = *make_model("resnet18");
  const PruneSpec spec{PruneKind::Channel, 0.4, 5};
  const auto buckets = ddp_buckets(model, 4);
  const auto bucket_masks = prune(model, buckets, spec);
  const auto param_masks = prune_parameters(model, spec);
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const BucketSpan& span : buckets[b].spans) {
      EXPECT_TRUE(std::equal(param_masks[span.param].begin(), param_masks[span.param].end(),
                             bucket_masks[b].begin() + static_cast<long>(span.offset)))
          << model.params[span.param].name;
    }
  }
}

}  // namespace
}  // namespace sieve::bench
