#include "plugin/proxy/agreement.h"

#include <algorithm>

#include "plugin/sieve.h"

namespace sieve::plugin::proxy {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::optional<ElemType> elem_type_of(compress::DType dtype) {
  switch (dtype) {
    case compress::DType::kF32: return ElemType::kF32;
    case compress::DType::kF16: return ElemType::kF16;
    case compress::DType::kBF16: return ElemType::kBF16;
    case compress::DType::kF64: return ElemType::kF64;
    default: return std::nullopt;
  }
}

// Address-free: what a rank published, in publish order, never where its allocator put it.
uint64_t table_hash(const std::vector<std::shared_ptr<const compress::PublishedMask>>& entries, uint32_t flags,
                    bool with_masks) {
  uint64_t h = mix(0x5349455645544142ull, flags);
  h = mix(h, entries.size());
  for (const auto& e : entries) {
    h = mix(h, e->count());
    h = mix(h, uint64_t(e->dtype()));
    if (with_masks) h = mix(h, e->mask()->hash());
  }
  return h;
}

// Prepares plans for `masks` (parallel to `entries`), reusing the active table's where the entry is
// the same. Returns false, with *why, when this rank could not.
bool prepare(const AgreementContext& ctx, const std::vector<std::shared_ptr<const compress::PublishedMask>>& entries,
             const std::vector<std::shared_ptr<const compress::Mask>>& masks, std::vector<ActiveEntry>* out,
             std::string* why) {
  out->clear();
  if (ctx.veto) {
    *why = ctx.veto;
    return false;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    ActiveEntry entry{entries[i], nullptr};
    const bool same_mask = masks[i] == entries[i]->mask();
    if (ctx.reusable && same_mask) {
      auto it = ctx.reusable->find(entries[i]->id());
      if (it != ctx.reusable->end()) entry.plan = it->second;
    }
    const std::optional<ElemType> type = elem_type_of(entries[i]->dtype());
    if (!entry.plan && type) {
      if (EntryPlan::build(ctx.backend, masks[i], *type, ctx.rules, ctx.nranks, /*with_flag=*/false, &entry.plan, why))
        return false;
    }
    out->push_back(std::move(entry));
  }
  return true;
}

// The union of every rank's masks: each mask as one byte per element, all-reduced with max.
int merge_masks(const AgreementContext& ctx, DeviceBuffer& staging,
                const std::vector<std::shared_ptr<const compress::PublishedMask>>& entries,
                std::vector<std::shared_ptr<const compress::Mask>>* merged) {
  merged->clear();
  for (const auto& e : entries) {
    std::vector<uint8_t> bytes(e->count());
    for (uint64_t i = 0; i < e->count(); ++i) bytes[i] = e->mask()->test(i) ? 1 : 0;
    if (int rc = ctx.backend.exchange_max(ctx.comm, ctx.stream, bytes.data(), bytes.size(), 1, staging)) return rc;
    merged->push_back(std::make_shared<const compress::Mask>(compress::Mask::from_bytes(bytes.data(), bytes.size())));
  }
  return kResultSuccess;
}

}  // namespace

std::string Verdict::reason(const std::string& local_failure) const {
  if (!same_settings)
    return "the ranks run the proxy with different settings (SIEVE_PROXY, SIEVE_PROXY_MAX_DENSITY, "
           "SIEVE_PROXY_MIN_COUNT, SIEVE_TRACK* must be the same on every rank)";
  if (!same_subject) return "the ranks committed different masks (or published them in a different order)";
  if (!all_ok)
    return local_failure.empty() ? std::string("another rank could not prepare it")
                                 : "this rank could not prepare it: " + local_failure;
  return "";
}

int vote(DeviceBackend& backend, Comm comm, Stream stream, DeviceBuffer& staging, const Vote& mine, Verdict* out) {
  uint64_t words[kVoteWords] = {mine.subject, ~mine.subject, mine.settings, ~mine.settings, mine.ok ? 0u : 1u, 0};
  if (int rc = backend.exchange_max(comm, stream, words, kVoteWords, 8, staging)) return rc;
  out->same_subject = words[0] == mine.subject && words[1] == ~mine.subject;
  out->same_settings = words[2] == mine.settings && words[3] == ~mine.settings;
  out->all_ok = words[4] == 0;
  return kResultSuccess;
}

int agree_table(const AgreementContext& ctx, const compress::CommittedTable& table, TableAgreement* out) {
  *out = TableAgreement();
  // Entries retired since the commit (republished or retracted at the same program point on every
  // rank) are no longer part of it.
  std::vector<std::shared_ptr<const compress::PublishedMask>> live;
  for (const auto& e : table.entries)
    if (!e->retired()) live.push_back(e);
  const bool merge = (table.flags & SIEVE_COMMIT_UNION) != 0;
  std::string local_failure;
  Verdict verdict;

  if (!merge) {
    std::vector<std::shared_ptr<const compress::Mask>> masks;
    for (const auto& e : live) masks.push_back(e->mask());
    const bool ok = prepare(ctx, live, masks, &out->entries, &local_failure);
    if (int rc = vote(ctx.backend, ctx.comm, ctx.stream, ctx.vote_staging,
                      Vote{table_hash(live, table.flags, true), ctx.settings, ok}, &verdict))
      return rc;
  } else {
    // First the buffers must match and every rank must hold staging for the largest mask.
    uint64_t largest = kVoteWords * 8;
    for (const auto& e : live) largest = std::max(largest, e->count());
    std::unique_ptr<DeviceBuffer> staging;
    bool ok = !ctx.veto && ctx.backend.create_buffer(largest, &staging) == kResultSuccess;
    if (ctx.veto) local_failure = ctx.veto;
    else if (!ok) local_failure = "no device memory to merge masks of up to " + std::to_string(largest) + " elements";
    if (int rc = vote(ctx.backend, ctx.comm, ctx.stream, ctx.vote_staging,
                      Vote{table_hash(live, table.flags, false), ctx.settings, ok}, &verdict))
      return rc;
    if (verdict.unanimous()) {
      std::vector<std::shared_ptr<const compress::Mask>> merged;
      if (int rc = merge_masks(ctx, *staging, live, &merged)) return rc;
      ok = prepare(ctx, live, merged, &out->entries, &local_failure);
      if (int rc = vote(ctx.backend, ctx.comm, ctx.stream, ctx.vote_staging,
                        Vote{table_hash(live, table.flags, false), ctx.settings, ok}, &verdict))
        return rc;
    }
  }
  out->activated = verdict.unanimous();
  if (!out->activated) {
    out->reason = verdict.reason(local_failure);
    out->entries.clear();
  }
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
