// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/agreement.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "plugin/sieve.h"

namespace sieve::plugin::proxy {

static_assert(kVoteWords == SIEVE_COMMIT_TOKEN_WORDS, "a commit token holds one vote");
static_assert(int64_t(Refusal::kNoProxy) == SIEVE_COMMIT_TOKEN_NO_PROXY, "the binding's no-proxy vote");

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

// Address-free: what a rank published, in publish order, never where its allocator put it.
uint64_t table_hash(const compress::StagedEntries& entries,
                    const std::vector<std::shared_ptr<const compress::Mask>>* masks, uint32_t flags) {
  uint64_t h = mix(0x5349455645544142ull, flags);
  h = mix(h, entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto collective = entries[i]->collective();  // 0 for a buffer's mask, as the codes were
    h = mix(h, collective ? uint64_t(*collective) : 0);
    h = mix(h, entries[i]->count());
    h = mix(h, uint64_t(entries[i]->dtype()));
    if (masks) h = mix(h, (*masks)[i]->hash());
  }
  return h;
}

std::vector<std::shared_ptr<const compress::Mask>> own_masks(const compress::StagedEntries& entries) {
  std::vector<std::shared_ptr<const compress::Mask>> masks;
  for (const auto& e : entries) masks.push_back(e->mask());
  return masks;
}

// Prepares plans for `masks` (parallel to `entries`), reusing the active table's where the entry is
// the same. Returns false, with *why, when this rank could not.
bool prepare(const AgreementContext& ctx, const compress::StagedEntries& entries,
             const std::vector<std::shared_ptr<const compress::Mask>>& masks, std::vector<ActiveEntry>* out,
             std::string* why) {
  out->clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    ActiveEntry entry{entries[i], nullptr, masks[i]};
    if (ctx.reusable && masks[i] == entries[i]->mask()) {
      auto it = ctx.reusable->find(entries[i]->id());
      if (it != ctx.reusable->end() && it->second->verifies() == ctx.verify) entry.plan = it->second;
    }
    const DType type = entries[i]->dtype();
    if (!entry.plan && compactable(type)) {
      PlanSpec spec{type, ctx.rules, ctx.nranks, /*with_flag=*/false, ctx.verify};
      if (EntryPlan::build(ctx.backend, masks[i], spec, &entry.plan, why)) return false;
    }
    out->push_back(std::move(entry));
  }
  return true;
}

}  // namespace

void write_vote(const Vote& v, void* words) {
  const int64_t w[kVoteWords] = {int64_t(v.subject),   int64_t(~v.subject), int64_t(v.settings),
                                 int64_t(~v.settings), int64_t(v.refusal),  0};
  std::memcpy(words, w, sizeof w);
}

void write_no_proxy_vote(void* words) {
  int64_t w[kVoteWords];
  std::fill(std::begin(w), std::end(w), INT64_MIN);
  w[4] = int64_t(Refusal::kNoProxy);
  std::memcpy(words, w, sizeof w);
}

Verdict read_verdict(const Vote& mine, const void* words) {
  int64_t w[kVoteWords];
  std::memcpy(w, words, sizeof w);
  Verdict v;
  v.same_subject = w[0] == int64_t(mine.subject) && w[1] == int64_t(~mine.subject);
  v.same_settings = w[2] == int64_t(mine.settings) && w[3] == int64_t(~mine.settings);
  v.worst = Refusal(std::clamp<int64_t>(w[4], 0, int64_t(Refusal::kNoProxy)));
  return v;
}

std::string Verdict::reason(const std::string& local_failure) const {
  switch (worst) {
    case Refusal::kNoProxy:
      return "a rank has no collective proxy (the library is not LD_PRELOADed there, or the commit's all-reduce "
             "did not reach it)";
    case Refusal::kProxyOff: return "SIEVE_PROXY=off on a rank";
    default: break;
  }
  if (!same_settings)
    return "the ranks run the proxy with different settings (SIEVE_PROXY_MAX_DENSITY, SIEVE_PROXY_MIN_COUNT, "
           "SIEVE_PROXY_VERIFY, SIEVE_TRACK, SIEVE_TRACK_STABLE, SIEVE_TRACK_LAG must be the same on every rank)";
  if (!same_subject) return "the ranks committed different masks (or published them in a different order)";
  if (worst == Refusal::kCouldNotPrepare)
    return local_failure.empty() ? std::string("another rank could not prepare it")
                                 : "this rank could not prepare it: " + local_failure;
  return "";
}

int TableCommit::begin(const AgreementContext& ctx, compress::StagedEntries entries, uint32_t flags, Exchange& vote,
                       void* token, std::unique_ptr<TableCommit>* out, int* collective_rc) {
  std::unique_ptr<TableCommit> c(new TableCommit());
  c->entries_ = std::move(entries);
  c->flags_ = flags;
  c->token_ = token;
  const bool merge = (flags & SIEVE_COMMIT_UNION) != 0;
  Refusal refusal = ctx.veto;
  if (refusal == Refusal::kNone) {
    if (!merge) {
      if (!prepare(ctx, c->entries_, own_masks(c->entries_), &c->prepared_, &c->local_failure_))
        refusal = Refusal::kCouldNotPrepare;
    } else {
      // The union needs, on every rank, staging for the largest mask's bytes.
      uint64_t largest = 1;
      for (const auto& e : c->entries_) largest = std::max(largest, e->count());
      if (ctx.backend.create_exchange(largest, &c->merge_)) {
        refusal = Refusal::kCouldNotPrepare;
        c->local_failure_ = "no device memory to merge masks of up to " + std::to_string(largest) + " elements";
      }
    }
  }
  // The union compares buffers only (the masks may differ); otherwise the masks too.
  const auto masks = own_masks(c->entries_);
  c->mine_ = Vote{table_hash(c->entries_, merge ? nullptr : &masks, flags), ctx.settings, refusal};
  write_vote(c->mine_, vote.host());
  *collective_rc = ctx.backend.exchange_in(vote, token, kVoteWords, 8, ctx.comm, ctx.stream);
  *out = std::move(c);
  return enqueued(*collective_rc) ? kResultSuccess : *collective_rc;
}

void TableCommit::stage_merge(ExchangeStep* next) {
  const compress::Mask& m = *entries_[merged_]->mask();
  auto* bytes = static_cast<uint8_t*>(merge_->host());
  for (uint64_t j = 0; j < m.count(); ++j) bytes[j] = m.test(j) ? 1 : 0;
  *next = ExchangeStep{merge_.get(), m.count(), 1};
}

void TableCommit::conclude(TableAgreement* out) {
  *out = TableAgreement();
  out->activated = verdict_.unanimous();
  if (!out->activated) {
    out->reason = verdict_.reason(local_failure_);
    return;
  }
  out->entries = std::move(prepared_);
  out->hash = table_hash(entries_, &masks_, flags_);
}

int TableCommit::read(const AgreementContext& ctx, Exchange& vote, ExchangeStep* next, TableAgreement* out) {
  *next = ExchangeStep();
  if (int rc = ctx.backend.exchange_out(vote, token_, kVoteWords, 8, ctx.stream)) return rc;
  if (int rc = ctx.backend.wait_exchange(vote, ctx.comm, ctx.live)) return rc;
  verdict_ = read_verdict(mine_, vote.host());
  masks_ = own_masks(entries_);
  if ((flags_ & SIEVE_COMMIT_UNION) && verdict_.unanimous()) {
    // Every rank holds the same buffers and staging: OR the masks one entry at a time, build the
    // plans on the union, and vote again on whether every rank could.
    merged_ = 0;
    if (!entries_.empty()) {
      stage_merge(next);
      return kResultSuccess;
    }
    return resume(ctx, vote, next, out);
  }
  conclude(out);
  return kResultSuccess;
}

int TableCommit::resume(const AgreementContext& ctx, Exchange& vote, ExchangeStep* next, TableAgreement* out) {
  *next = ExchangeStep();
  if (voting_again_) {
    verdict_ = read_verdict(again_, vote.host());
    conclude(out);
    return kResultSuccess;
  }
  if (merged_ < entries_.size()) {
    const uint64_t count = entries_[merged_]->count();
    masks_[merged_] = std::make_shared<const compress::Mask>(
        compress::Mask::from_bytes(static_cast<const uint8_t*>(merge_->host()), count));
    if (++merged_ < entries_.size()) {
      stage_merge(next);
      return kResultSuccess;
    }
  }
  again_ = mine_;
  if (!prepare(ctx, entries_, masks_, &prepared_, &local_failure_)) again_.refusal = Refusal::kCouldNotPrepare;
  write_vote(again_, vote.host());
  voting_again_ = true;
  *next = ExchangeStep{&vote, kVoteWords, 8};
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
