// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/pruning.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sieve::bench {

void select_exactly(SplitMix64& rng, size_t n, size_t keep, uint8_t* out, size_t stride_elems) {
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t left = n - i;
    const bool take = kept < keep && rng.unit() * static_cast<double>(left) < static_cast<double>(keep - kept);
    if (take) ++kept;
    std::memset(out + i * stride_elems, take ? 1 : 0, stride_elems);
  }
}

namespace {

size_t rounded(double density, size_t n) {
  return std::min(n, static_cast<size_t>(std::llround(density * static_cast<double>(n))));
}

void prune_param(const Param& param, const PruneSpec& spec, uint64_t param_index, uint8_t* out, size_t count) {
  if (spec.kind == PruneKind::None || !param.prunable()) {
    std::memset(out, 1, count);
    return;
  }
  // One stream per parameter: masks do not shift when another parameter changes.
  SplitMix64 rng(spec.seed * 0x100000001b3ull + param_index);
  if (spec.kind == PruneKind::Unstructured) {
    select_exactly(rng, count, rounded(spec.density, count), out, 1);
    return;
  }
  const size_t rows = static_cast<size_t>(param.shape[0]);
  const size_t keep = std::max<size_t>(1, rounded(spec.density, rows));  // a layer never vanishes
  select_exactly(rng, rows, keep, out, count / rows);
}

}  // namespace

std::vector<BucketMask> prune(const Model& model, const std::vector<Bucket>& buckets, const PruneSpec& spec) {
  std::vector<BucketMask> masks;
  masks.reserve(buckets.size());
  for (const Bucket& bucket : buckets) {
    BucketMask mask(bucket.elements);
    for (const BucketSpan& span : bucket.spans) {
      prune_param(model.params[span.param], spec, span.param, mask.data() + span.offset, span.count);
    }
    masks.push_back(std::move(mask));
  }
  return masks;
}

std::vector<std::vector<uint8_t>> prune_parameters(const Model& model, const PruneSpec& spec) {
  std::vector<std::vector<uint8_t>> masks;
  masks.reserve(model.params.size());
  for (size_t i = 0; i < model.params.size(); ++i) {
    std::vector<uint8_t> mask(static_cast<size_t>(model.params[i].elements()));
    prune_param(model.params[i], spec, i, mask.data(), mask.size());
    masks.push_back(std::move(mask));
  }
  return masks;
}

double kept_fraction(const std::vector<BucketMask>& masks) {
  size_t kept = 0, total = 0;
  for (const BucketMask& mask : masks) {
    for (uint8_t m : mask) kept += m;
    total += mask.size();
  }
  return total == 0 ? 1.0 : static_cast<double>(kept) / static_cast<double>(total);
}

}  // namespace sieve::bench
