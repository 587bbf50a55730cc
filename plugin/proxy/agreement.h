// How the ranks of a communicator agree before anything changes which collectives they issue.
//
// A vote folds what must be identical on every rank into six 64-bit words: the subject (the hash of
// a committed table or of a learned mask), the job-wide proxy settings, and whether this rank could
// prepare everything activation needs. One all-reduce (max) of the words, issued by every rank at the
// same collective, gives every rank the same verdict: max(h) == h and max(~h) == ~h on a rank iff no
// rank voted another h. Activation happens only on a unanimous verdict, so a rank that could not
// allocate, or holds other masks or other settings, makes every rank stay as it was.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compress/mask_registry.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/entry_plan.h"

namespace sieve::plugin::proxy {

struct Vote {
  uint64_t subject = 0;
  uint64_t settings = 0;
  bool ok = true;
};

struct Verdict {
  bool same_subject = false;
  bool same_settings = false;
  bool all_ok = false;
  bool unanimous() const { return same_subject && same_settings && all_ok; }
  // Why a verdict is not unanimous, for the warning every rank logs.
  std::string reason(const std::string& local_failure) const;
};

// Words of staging memory a vote needs.
constexpr uint64_t kVoteWords = 6;

int vote(DeviceBackend& backend, Comm comm, Stream stream, DeviceBuffer& staging, const Vote& mine, Verdict* out);

// A committed table's entries as one communicator uses them once agreed.
struct ActiveEntry {
  std::shared_ptr<const compress::PublishedMask> source;
  std::shared_ptr<EntryPlan> plan;  // null: the entry compacts nothing (too dense, or not a float type)
};

struct TableAgreement {
  bool activated = false;
  std::string reason;                // why not, when not
  std::vector<ActiveEntry> entries;  // the new active table when activated
};

// Everything table agreement reads besides the table.
struct AgreementContext {
  DeviceBackend& backend;
  Comm comm;
  Stream stream;
  DeviceBuffer& vote_staging;
  PlanRules rules;
  uint64_t settings = 0;  // fingerprint of the job-wide settings
  int nranks = 1;
  // Plans of the active table, by mask id: an entry still live is not prepared twice.
  const std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>>* reusable = nullptr;
  // This rank takes part but refuses (SIEVE_PROXY=off): it prepares nothing and votes no.
  const char* veto = nullptr;
};

// Agrees `table` (its live entries, in publish order) on ctx.comm. Without SIEVE_COMMIT_UNION the
// ranks must have committed the same masks; with it, the same buffers (counts, dtypes, order) and
// the masks are OR-merged across ranks before the plans are built (then voted on again: every rank
// must have built them). Returns the communicator's error when an exchange itself failed.
int agree_table(const AgreementContext& ctx, const compress::CommittedTable& table, TableAgreement* out);

}  // namespace sieve::plugin::proxy
