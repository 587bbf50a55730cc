// SPDX-License-Identifier: Apache-2.0
// DDP's gradient buckets: parameters in reverse registration order (the order backward produces
// gradients), packed greedily into buckets closed once they reach the cap; the first bucket is
// capped at 1 MiB so the first all-reduce starts early (torch's _DEFAULT_FIRST_BUCKET_BYTES).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/sieve-bench/models.h"

namespace sieve::bench {

constexpr size_t kDdpBucketCapBytes = 25u << 20;
constexpr size_t kDdpFirstBucketBytes = 1u << 20;

struct BucketSpan {
  size_t param;   // index into Model::params
  size_t offset;  // first element of this parameter inside the bucket
  size_t count;   // elements
};

struct Bucket {
  std::vector<BucketSpan> spans;
  size_t elements = 0;
};

std::vector<Bucket> ddp_buckets(const Model& model, size_t element_bytes, size_t cap_bytes = kDdpBucketCapBytes,
                                size_t first_cap_bytes = kDdpFirstBucketBytes);

}  // namespace sieve::bench
