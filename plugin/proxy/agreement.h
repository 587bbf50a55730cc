// SPDX-License-Identifier: Apache-2.0
// How the ranks of a communicator agree, at a commit, before anything changes which collectives they
// issue.
//
// A commit is a collective the trainer issues on one communicator. Its vote folds what must be
// identical on every rank into six int64 words, all-reduced with max: the subject (the hash of the
// staged table) and its complement, the job-wide proxy settings and their complement, the worst
// refusal (this rank could not prepare the table, its proxy is off, or it has no proxy at all) and a
// reserved word. max(h) == h and max(~h) == ~h on a rank iff no rank voted another h (two's
// complement keeps that true for signed words), so every rank reads the same verdict from the same
// collective. A rank without the proxy contributes the "no proxy" vote its binding wrote (every word
// INT64_MIN but the refusal), which refuses the commit everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compress/mask_registry.h"
#include "plugin/proxy/device_backend.h"
#include "plugin/proxy/entry_plan.h"

namespace sieve::plugin::proxy {

constexpr uint64_t kVoteWords = 6;
constexpr uint64_t kVoteBytes = kVoteWords * 8;

// Why a rank votes no; the highest one any rank voted names the verdict's reason.
enum class Refusal : int64_t {
  kNone = 0,
  kCouldNotPrepare = 1,  // no device memory for a plan or for the union's merge
  kProxyOff = 2,         // SIEVE_PROXY=off
  kNoProxy = 3,          // the binding's token reached NCCL directly: no proxy on that rank
};

struct Vote {
  uint64_t subject = 0;
  uint64_t settings = 0;
  Refusal refusal = Refusal::kNone;
};

struct Verdict {
  bool same_subject = false;
  bool same_settings = false;
  Refusal worst = Refusal::kNone;
  bool unanimous() const { return same_subject && same_settings && worst == Refusal::kNone; }
  // Why a verdict is not unanimous: the same words on every rank, plus this rank's own detail.
  std::string reason(const std::string& local_failure) const;
};

void write_vote(const Vote& vote, void* words);
Verdict read_verdict(const Vote& mine, const void* words);
// The "no proxy" vote a binding writes into its token (sieve.h: SIEVE_COMMIT_TOKEN_*).
void write_no_proxy_vote(void* words);

// A committed table's entries as one communicator uses them once agreed.
struct ActiveEntry {
  std::shared_ptr<const compress::PublishedMask> source;
  std::shared_ptr<EntryPlan> plan;  // null: the entry compacts nothing (too dense, or not a float type)
  // The mask every rank agreed on: the source's own, or with SIEVE_COMMIT_UNION the OR of every
  // rank's (the source's then differs per rank). Decisions compare this one, never the source's.
  std::shared_ptr<const compress::Mask> agreed;
};

struct TableAgreement {
  bool activated = false;
  std::string reason;                // why not, when not
  std::vector<ActiveEntry> entries;  // the new active table when activated
  uint64_t hash = 0;                 // the agreed table's address-free hash
};

// Everything a commit reads besides the staged table.
struct AgreementContext {
  DeviceBackend& backend;
  Comm comm;
  Stream stream;
  CommLiveness& live;
  PlanRules rules;
  uint64_t settings = 0;  // fingerprint of the job-wide settings
  int nranks = 1;
  bool verify = false;  // plans carry a buffer for SIEVE_PROXY_VERIFY's dense run
  // Plans of the active table, by mask id: an entry still staged is not prepared twice.
  const std::unordered_map<uint64_t, std::shared_ptr<EntryPlan>>* reusable = nullptr;
  // This rank takes part but refuses (SIEVE_PROXY=off): it prepares nothing and votes so.
  Refusal veto = Refusal::kNone;
};

// One exchange an agreement needs next. At a group's end every communicator's next exchange is
// issued together, in one NCCL group: one thread may drive several ranks of one communicator
// (ncclCommInitAll), and ranks may put communicators into a group in different orders, so no rank
// may wait on one communicator's exchange while another waits on another's.
struct ExchangeStep {
  Exchange* exchange = nullptr;  // null: nothing more to exchange
  uint64_t count = 0;
  int width = 8;
};

// One commit on one communicator, in steps so that it can be issued inside an NCCL group:
// begin() at the trainer's call issues the vote's collective (queued in the group when inside one),
// read() reads the verdict once that collective is on the stream, and each later exchange it needs
// (a union's merges, its second vote) is the caller's to issue before resume().
class TableCommit {
 public:
  // Prepares the plans the staged `entries` need (or records why it cannot), writes this rank's vote
  // into `vote` and issues the exchange, into `token` when the trainer's own all-reduce carries it.
  // The collective is issued whatever preparation found: only its words say so. A non-zero return
  // means the collective itself could not be issued (the communicator is then unusable).
  static int begin(const AgreementContext& ctx, compress::StagedEntries entries, uint32_t flags, Exchange& vote,
                   void* token, std::unique_ptr<TableCommit>* out, int* collective_rc);
  // Reads the verdict. With SIEVE_COMMIT_UNION and a unanimous verdict, *next names the exchanges
  // that OR-merge the masks across ranks (bytes, max) and then a second vote; otherwise, and once
  // *next is empty, *out holds the outcome. Returns the communicator's error when an exchange failed
  // (the ranks may then disagree: the caller aborts the communicator).
  int read(const AgreementContext& ctx, Exchange& vote, ExchangeStep* next, TableAgreement* out);
  // After the exchange read() or resume() named has run: the next one, or the outcome.
  int resume(const AgreementContext& ctx, Exchange& vote, ExchangeStep* next, TableAgreement* out);

 private:
  TableCommit() = default;
  void stage_merge(ExchangeStep* next);
  void conclude(TableAgreement* out);

  compress::StagedEntries entries_;
  uint32_t flags_ = 0;
  Vote mine_, again_;
  void* token_ = nullptr;
  std::string local_failure_;
  std::vector<ActiveEntry> prepared_;
  std::unique_ptr<Exchange> merge_;  // SIEVE_COMMIT_UNION: staging for the largest mask's bytes
  Verdict verdict_;
  std::vector<std::shared_ptr<const compress::Mask>> masks_;  // the agreed ones, once merged
  size_t merged_ = 0;                                         // entries merged so far
  bool voting_again_ = false;
};

}  // namespace sieve::plugin::proxy
