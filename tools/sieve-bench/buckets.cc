// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/buckets.h"

namespace sieve::bench {

std::vector<Bucket> ddp_buckets(const Model& model, size_t element_bytes, size_t cap_bytes, size_t first_cap_bytes) {
  std::vector<Bucket> buckets;
  Bucket current;
  size_t limit = first_cap_bytes;
  for (size_t i = model.params.size(); i-- > 0;) {
    const size_t count = static_cast<size_t>(model.params[i].elements());
    current.spans.push_back({i, current.elements, count});
    current.elements += count;
    // Like DDP, a bucket closes after the tensor that makes it reach the limit, so it may exceed it.
    if (current.elements * element_bytes >= limit) {
      buckets.push_back(std::move(current));
      current = Bucket{};
      limit = cap_bytes;
    }
  }
  if (!current.spans.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace sieve::bench
