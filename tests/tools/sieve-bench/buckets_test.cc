// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "tools/sieve-bench/buckets.h"

namespace sieve::bench {
namespace {

TEST(Buckets, CoverEveryParameterOnceInReverseOrder) {
  const Model model = *make_model("resnet50");
  const auto buckets = ddp_buckets(model, 4);
  size_t expected_param = model.params.size();
  size_t total = 0;
  for (const Bucket& bucket : buckets) {
    size_t offset = 0;
    for (const BucketSpan& span : bucket.spans) {
      ASSERT_EQ(span.param, --expected_param);
      EXPECT_EQ(span.offset, offset);
      EXPECT_EQ(span.count, static_cast<size_t>(model.params[span.param].elements()));
      offset += span.count;
    }
    EXPECT_EQ(offset, bucket.elements);
    total += bucket.elements;
  }
  EXPECT_EQ(expected_param, 0u);
  EXPECT_EQ(total, static_cast<size_t>(model.elements()));
}

TEST(Buckets, FirstBucketClosesAtOneMebibyteThenTwentyFive) {
  const Model model = *make_model("resnet50");
  const auto buckets = ddp_buckets(model, 4);
  ASSERT_GE(buckets.size(), 3u);
  // fc.bias (1000) and fc.weight (2,048,000 floats = 8 MB) make the first bucket: it closes after
  // the tensor that reaches 1 MiB, like DDP's.
  EXPECT_EQ(buckets[0].spans.size(), 2u);
  EXPECT_EQ(buckets[0].elements, 2049000u);
  for (size_t i = 1; i + 1 < buckets.size(); ++i) {
    const size_t bytes = buckets[i].elements * 4;
    EXPECT_GE(bytes, kDdpBucketCapBytes) << "bucket " << i;
    // Without its last tensor a bucket was still below the cap.
    EXPECT_LT(bytes - buckets[i].spans.back().count * 4, kDdpBucketCapBytes) << "bucket " << i;
  }
}

TEST(Buckets, SixteenBitElementsHoldTwiceAsMany) {
  const Model model = *make_model("vgg19");
  const auto wide = ddp_buckets(model, 4);
  const auto narrow = ddp_buckets(model, 2);
  EXPECT_LE(narrow.size(), wide.size());
}

TEST(Buckets, SmallCapsStillKeepTensorsWhole) {
  Model model{"toy",
              "Toy",
              {{"a", {10}, ParamRole::Bias}, {"b", {3, 3}, ParamRole::LinearWeight}, {"c", {4}, ParamRole::Bias}}};
  const auto buckets = ddp_buckets(model, 4, /*cap_bytes=*/16, /*first_cap_bytes=*/8);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].spans[0].param, 2u);
  EXPECT_EQ(buckets[1].spans[0].param, 1u);
  EXPECT_EQ(buckets[2].spans[0].param, 0u);
}

}  // namespace
}  // namespace sieve::bench
