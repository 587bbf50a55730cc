// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/fsdp_step.h"

#include <cstring>

#include "compress/compact_host.h"
#include "tools/sieve-bench/gradients.h"

namespace sieve::bench {

namespace {

using Clock = std::chrono::steady_clock;

size_t sum_over(const std::vector<FsdpGroup>& groups, int nranks, size_t (*of)(const FsdpGroup&, int)) {
  size_t total = 0;
  for (const FsdpGroup& g : groups) total += of(g, nranks);
  return total;
}

// A quiet NaN: compares unequal to every value, so a position nobody wrote is always caught.
void poison(DType type, void* data, size_t count) {
  if (type == DType::kF32) {
    const uint32_t nan = 0x7fc00000u;
    for (size_t i = 0; i < count; ++i) std::memcpy(static_cast<char*>(data) + i * 4, &nan, 4);
  } else {
    uint16_t* out = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < count; ++i) out[i] = 0x7fc0u;
  }
}

// Parameters and gradients come from different streams of the same exact pattern.
GradientPattern parameter_pattern(int nranks, uint64_t iteration, DType type) {
  return GradientPattern(nranks, 2 * iteration, type);
}
GradientPattern gradient_pattern(int nranks, uint64_t iteration, DType type) {
  return GradientPattern(nranks, 2 * iteration + 1, type);
}

}  // namespace

size_t FsdpWorkload::buffer_elements() const {
  return sum_over(groups, nranks, [](const FsdpGroup& g, int n) { return g.buffer_elements(n); });
}

size_t FsdpWorkload::kept_elements() const {
  size_t kept = 0;
  for (const ShardCompaction& c : compaction) {
    for (size_t k : c.kept) kept += k;
  }
  return kept;
}

size_t FsdpWorkload::compacted_elements() const {
  size_t moved = 0;
  for (size_t g = 0; g < groups.size(); ++g) moved += compaction[g].moved_elements(groups[g].buffer_elements(nranks));
  return moved;
}

size_t FsdpWorkload::groups_compacted() const {
  size_t n = 0;
  for (const ShardCompaction& c : compaction) n += c.compacts ? 1 : 0;
  return n;
}

FsdpWorkload make_fsdp_workload(const Model& model, int nranks, const std::vector<std::vector<uint8_t>>& keep,
                                const ProxyRules& rules) {
  FsdpWorkload work;
  work.nranks = nranks;
  work.groups = fsdp_groups(model, nranks);
  for (const FsdpGroup& group : work.groups) {
    work.unpruned.push_back(fsdp_buffer_mask(group, nranks, nullptr));
    work.pruned.push_back(fsdp_buffer_mask(group, nranks, &keep));
    work.compaction.push_back(shard_compaction(work.pruned.back(), nranks, rules));
  }
  return work;
}

FsdpStep::FsdpStep(const FsdpWorkload& work, Mode mode, int rank, DType type)
    : work_(work), mode_(mode), rank_(rank), nranks_(work.nranks), type_(type), elem_(dtype_size(type)) {}

const std::vector<uint8_t>& FsdpStep::mask_of(size_t group) const {
  return mode_ == Mode::Dense ? work_.unpruned[group] : work_.pruned[group];
}

bool FsdpStep::compacts(size_t group) const { return mode_ == Mode::Compacted && work_.compaction[group].compacts; }

char* FsdpStep::params_at(size_t group) const { return params_->data.get() + first_[group] * elem_; }
char* FsdpStep::grads_at(size_t group) const { return grads_->data.get() + first_[group] * elem_; }

std::string FsdpStep::allocate() {
  size_t total = 0, compact_total = 0;
  for (size_t g = 0; g < work_.groups.size(); ++g) {
    const FsdpGroup& group = work_.groups[g];
    first_.push_back(total);
    total += group.buffer_elements(nranks_);
    compact_first_.push_back(compact_total);
    layouts_.emplace_back();
    if (!compacts(g)) continue;
    compact_total += work_.compaction[g].width * static_cast<size_t>(nranks_);
    // What the proxy's plan holds on the device: the group's layout, built once.
    const std::vector<uint8_t>& mask = work_.pruned[g];
    layouts_.back() =
        sieve::compress::build_tile_layout(sieve::compress::Mask::from_bytes(mask.data(), mask.size()), 0, mask.size());
  }
  params_ = std::make_unique<Arena>(total * elem_);
  grads_ = std::make_unique<Arena>(total * elem_);
  compact_ = std::make_unique<Arena>(compact_total * elem_);
  if (!params_->data || !grads_->data || !compact_->data) {
    return "out of memory for " + std::to_string((2 * total + compact_total) * elem_) + " bytes of FSDP buffers";
  }
  // A shard's slot beyond its kept count is padding: zero here, it stays zero (sums of zeros, and
  // copies of other ranks' zeros), and it is never read back.
  std::memset(compact_->data.get(), 0, compact_->size);
  return "";
}

std::vector<std::pair<void*, size_t>> FsdpStep::ring_regions() const {
  std::vector<std::pair<void*, size_t>> regions;
  for (const Arena* arena : {params_.get(), grads_.get(), compact_.get()}) {
    if (arena && arena->size > 0) regions.emplace_back(arena->data.get(), arena->size);
  }
  return regions;
}

void FsdpStep::fill(uint64_t iteration) {
  const GradientPattern params = parameter_pattern(nranks_, iteration, type_);
  const GradientPattern grads = gradient_pattern(nranks_, iteration, type_);
  for (size_t g = 0; g < work_.groups.size(); ++g) {
    const size_t shard = work_.groups[g].shard_elements, count = shard * static_cast<size_t>(nranks_);
    const size_t own = shard * static_cast<size_t>(rank_);
    const uint8_t* mask = mask_of(g).data();
    poison(type_, params_at(g), count);
    fill_gradients(params, rank_, first_[g] + own, shard, type_, mask + own, params_at(g) + own * elem_);
    fill_gradients(grads, rank_, first_[g], count, type_, mask, grads_at(g));
  }
}

// Shard s's kept elements into its slot of the compact buffer (beyond its kept count: padding).
void FsdpStep::gather(size_t g, int s, const char* buffer) {
  const sieve::compress::TileLayout& layout = layouts_[g];
  const size_t width = work_.compaction[g].width, shard = work_.groups[g].shard_elements;
  char* to = compact_->data.get() + (compact_first_[g] + width * static_cast<size_t>(s)) * elem_;
  sieve::compress::gather_host({layout.bits.data(), layout.tile_base.data(), layout.count},
                               shard * static_cast<size_t>(s), shard, elem_, buffer, to);
}

// Exact zeros wherever the shard's mask is 0, the collective's values where it is 1.
void FsdpStep::scatter(size_t g, int s, char* buffer) const {
  const sieve::compress::TileLayout& layout = layouts_[g];
  const size_t width = work_.compaction[g].width, shard = work_.groups[g].shard_elements;
  const char* from = compact_->data.get() + (compact_first_[g] + width * static_cast<size_t>(s)) * elem_;
  sieve::compress::scatter_host({layout.bits.data(), layout.tile_base.data(), layout.count},
                                shard * static_cast<size_t>(s), shard, elem_, from, buffer);
}

FsdpStepResult FsdpStep::run(RingLink& link, void* scratch, const RingOptions& options) {
  FsdpStepResult result;
  Clock::duration compaction{};
  auto timed = [&compaction](auto&& work) {
    const auto start = Clock::now();
    work();
    compaction += Clock::now() - start;
  };
  auto failed = [&](const char* collective, size_t g, const std::string& error) {
    const std::string& name = work_.groups[g].name;
    result.error = std::string(collective) + " of group " + std::to_string(g) + " (" + (name.empty() ? "root" : name) +
                   "): " + error;
  };
  // Forward: every group's parameters gathered, in order.
  for (size_t g = 0; g < work_.groups.size(); ++g) {
    RingResult ring;
    if (compacts(g)) {
      const size_t count = work_.compaction[g].width * static_cast<size_t>(nranks_);
      timed([&] { gather(g, rank_, params_at(g)); });
      ring = ring_all_gather(link, rank_, nranks_, compact_->data.get() + compact_first_[g] * elem_, count, type_,
                             options);
      if (ring.error.empty()) {
        timed([&] {
          for (int s = 0; s < nranks_; ++s) scatter(g, s, params_at(g));
        });
      }
    } else {
      ring =
          ring_all_gather(link, rank_, nranks_, params_at(g), work_.groups[g].buffer_elements(nranks_), type_, options);
    }
    if (!ring.error.empty()) return failed("all-gather", g, ring.error), result;
    result.bytes_sent += ring.bytes_sent;
  }
  // Backward: every group's gradients reduce-scattered, in reverse order.
  for (size_t g = work_.groups.size(); g-- > 0;) {
    RingResult ring;
    if (compacts(g)) {
      const size_t count = work_.compaction[g].width * static_cast<size_t>(nranks_);
      timed([&] {
        for (int s = 0; s < nranks_; ++s) gather(g, s, grads_at(g));
      });
      ring = ring_reduce_scatter(link, rank_, nranks_, compact_->data.get() + compact_first_[g] * elem_, count, type_,
                                 scratch, options);
      if (ring.error.empty()) timed([&] { scatter(g, rank_, grads_at(g)); });
    } else {
      ring = ring_reduce_scatter(link, rank_, nranks_, grads_at(g), work_.groups[g].buffer_elements(nranks_), type_,
                                 scratch, options);
    }
    if (!ring.error.empty()) return failed("reduce-scatter", g, ring.error), result;
    result.bytes_sent += ring.bytes_sent;
  }
  result.compaction = std::chrono::duration_cast<std::chrono::nanoseconds>(compaction);
  return result;
}

std::string FsdpStep::check(uint64_t iteration) const {
  const GradientPattern params = parameter_pattern(nranks_, iteration, type_);
  const GradientPattern grads = gradient_pattern(nranks_, iteration, type_);
  for (size_t g = 0; g < work_.groups.size(); ++g) {
    const size_t shard = work_.groups[g].shard_elements;
    const uint8_t* mask = mask_of(g).data();
    const std::string& name = work_.groups[g].name;
    const std::string group = "group " + std::to_string(g) + " (" + (name.empty() ? "root" : name) + ")";
    for (int s = 0; s < nranks_; ++s) {
      const size_t at = shard * static_cast<size_t>(s);
      const std::string wrong =
          check_values(params, s, first_[g] + at, shard, type_, mask + at, params_at(g) + at * elem_);
      if (!wrong.empty()) return "all-gather of " + group + ", shard " + std::to_string(s) + ": " + wrong;
    }
    const size_t own = shard * static_cast<size_t>(rank_);
    const std::string wrong = check_sums(grads, first_[g] + own, shard, type_, mask + own, grads_at(g) + own * elem_);
    if (!wrong.empty()) return "reduce-scatter of " + group + ": " + wrong;
  }
  return "";
}

}  // namespace sieve::bench
