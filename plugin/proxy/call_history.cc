// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/call_history.h"

#include <cinttypes>
#include <cstdio>

namespace sieve::plugin::proxy {

namespace {

// A pre-multiplied sum keeps its kind, not its handle: 0xff; no type (one passed through): 0xff.
constexpr uint64_t kNone = 0xff;

uint64_t pack(const CallRecord& r) {
  const uint64_t op = is_premul_sum(r.op) ? kNone : uint64_t(r.op);
  const uint64_t type = r.type ? uint64_t(*r.type) : kNone;
  return uint64_t(r.kind) | op << 8 | type << 16 | uint64_t(r.path) << 24;
}

const char* kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce: return compress::collective_name(Collective::kAllReduce);
    case CallKind::kReduceScatter: return compress::collective_name(Collective::kReduceScatter);
    case CallKind::kAllGather: return compress::collective_name(Collective::kAllGather);
    case CallKind::kCommit: return "commit";
    case CallKind::kVote: return "learned-mask vote";
    case CallKind::kVerifyVerdict: return "SIEVE_PROXY_VERIFY verdict";
  }
  return "?";
}

const char* path_text(CallPath path) {
  switch (path) {
    case CallPath::kDense: return "dense";
    case CallPath::kCompactPublished: return "compact(published)";
    case CallPath::kCompactLearned: return "compact(learned)";
    case CallPath::kAgreement: return "agreement";
  }
  return "?";
}

}  // namespace

uint64_t CallHistory::add(CallRecord r) {
  r.seq = last_seq_.load(std::memory_order_relaxed) + 1;  // one writer: the communicator's driving thread
  Slot& s = slots_[r.seq % kDepth];
  // A sequence lock without fences (ThreadSanitizer has none): each field's release store keeps the
  // "being rewritten" mark before it, and the reader's acquire loads keep its second look after them.
  s.seq.store(0, std::memory_order_relaxed);
  s.shape.store(pack(r), std::memory_order_release);
  s.count.store(r.count, std::memory_order_release);
  s.table.store(r.table, std::memory_order_release);
  s.seq.store(r.seq, std::memory_order_release);
  last_seq_.store(r.seq, std::memory_order_release);
  return r.seq;
}

std::vector<CallRecord> CallHistory::recent() const {
  std::vector<CallRecord> out;
  const uint64_t last = last_seq();
  const uint64_t first = last >= kDepth ? last - kDepth + 1 : 1;
  for (uint64_t seq = first; seq <= last && seq > 0; ++seq) {
    const Slot& s = slots_[seq % kDepth];
    if (s.seq.load(std::memory_order_acquire) != seq) continue;
    CallRecord r;
    const uint64_t shape = s.shape.load(std::memory_order_acquire);
    r.count = s.count.load(std::memory_order_acquire);
    r.table = s.table.load(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != seq) continue;  // rewritten while read
    r.seq = seq;
    r.kind = CallKind(shape & 0xff);
    r.op = ((shape >> 8) & 0xff) == kNone ? premul_sum(0) : ReduceOp((shape >> 8) & 0xff);
    if (((shape >> 16) & 0xff) != kNone) r.type = DType((shape >> 16) & 0xff);
    r.path = CallPath((shape >> 24) & 0xff);
    out.push_back(r);
  }
  return out;
}

std::string describe(const CallRecord& r) {
  char line[256];
  const bool reduces = r.kind == CallKind::kAllReduce || r.kind == CallKind::kReduceScatter;
  std::snprintf(line, sizeof line, "#%" PRIu64 " %s%s%s %s x %" PRIu64 " %s table %016" PRIx64, r.seq,
                kind_name(r.kind), reduces ? " " : "", reduces ? reduce_op_name(r.op) : "",
                r.type ? compress::dtype_name(*r.type) : "other", r.count, path_text(r.path), r.table);
  return line;
}

}  // namespace sieve::plugin::proxy
