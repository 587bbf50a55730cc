// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>

#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {
namespace {

size_t kept_in(const BucketMask& mask, size_t first, size_t count) {
  size_t kept = 0;
  for (size_t i = first; i < first + count; ++i) kept += mask[i];
  return kept;
}

TEST(Pruning, UnstructuredKeepsExactlyTheDensityOfEachWeight) {
  const Model model = *make_model("resnet18");
  const auto buckets = ddp_buckets(model, 4);
  const auto masks = prune(model, buckets, {PruneKind::Unstructured, 0.2, 7});
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const BucketSpan& span : buckets[b].spans) {
      const Param& param = model.params[span.param];
      const size_t kept = kept_in(masks[b], span.offset, span.count);
      if (param.prunable()) {
        EXPECT_EQ(kept, static_cast<size_t>(std::llround(0.2 * static_cast<double>(span.count)))) << param.name;
      } else {
        EXPECT_EQ(kept, span.count) << param.name;
      }
    }
  }
  EXPECT_NEAR(kept_fraction(masks), 0.2, 0.002);  // biases and norms stay: slightly above d
  EXPECT_GT(kept_fraction(masks), 0.2);
}

TEST(Pruning, SameSeedSameMasksOtherSeedOtherMasks) {
  const Model model = *make_model("resnet18");
  const auto buckets = ddp_buckets(model, 4);
  const auto a = prune(model, buckets, {PruneKind::Unstructured, 0.3, 11});
  const auto b = prune(model, buckets, {PruneKind::Unstructured, 0.3, 11});
  const auto c = prune(model, buckets, {PruneKind::Unstructured, 0.3, 12});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Pruning, ChannelPruningRemovesWholeFilters) {
  const Model model = *make_model("resnet18");
  const auto buckets = ddp_buckets(model, 4);
  const auto masks = prune(model, buckets, {PruneKind::Channel, 0.5, 3});
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const BucketSpan& span : buckets[b].spans) {
      const Param& param = model.params[span.param];
      if (param.role != ParamRole::ConvWeight) continue;
      const size_t rows = static_cast<size_t>(param.shape[0]), row = span.count / rows;
      size_t kept_rows = 0;
      for (size_t r = 0; r < rows; ++r) {
        const size_t kept = kept_in(masks[b], span.offset + r * row, row);
        ASSERT_TRUE(kept == 0 || kept == row) << param.name << " filter " << r;
        kept_rows += kept == row;
      }
      EXPECT_EQ(kept_rows, rows / 2) << param.name;
    }
  }
}

TEST(Pruning, NoneKeepsEverything) {
  const Model model = *make_model("resnet18");
  const auto buckets = ddp_buckets(model, 4);
  EXPECT_EQ(kept_fraction(prune(model, buckets, {})), 1.0);
}

TEST(Pruning, SelectExactlyIsExactAtTheEdges) {
  SplitMix64 rng(5);
  std::vector<uint8_t> out(100);
  for (size_t keep : {size_t{0}, size_t{1}, size_t{50}, size_t{99}, size_t{100}}) {
    select_exactly(rng, out.size(), keep, out.data(), 1);
    EXPECT_EQ(kept_in(out, 0, out.size()), keep);
  }
}

}  // namespace
}  // namespace sieve::bench
