// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/data_path.h"

#include <errno.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "tests/net/ib/fake_verbs/api_common.h"
#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {
namespace {

bool usable_qp(Qp* qp, const char* verb) {
  if (!owned_here(qp->context->engine, "a QP")) return false;
  if (qp->destroyed) {
    violation("%s on destroyed QP %u", verb, qp->qpn());
    return false;
  }
  return true;
}

const char* state_name(ibv_qp_state state) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state >= IBV_QPS_RESET && state <= IBV_QPS_ERR ? kNames[state] : "UNKNOWN";
}

bool has_imm(ibv_wr_opcode opcode) { return opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND_WITH_IMM; }

bool is_rdma(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_RDMA_READ;
}

ibv_wc_opcode wc_opcode(ibv_wr_opcode opcode) {
  if (opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM) return IBV_WC_SEND;
  return opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
}

// Validates one work request and queues it; an errno value when the post itself fails.
int enqueue_send(Engine& engine, Qp* qp, const ibv_send_wr* wr) {
  if (qp->state == IBV_QPS_ERR) {
    ibv_wc wc{};
    wc.wr_id = wr->wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = wc_opcode(wr->opcode);
    wc.qp_num = qp->qpn();
    engine.push_completion(qp->send_cq, wc);
    return 0;
  }
  if (qp->state != IBV_QPS_RTS) {
    violation("post_send on QP %u in state %s (needs RTS)", qp->qpn(), state_name(qp->state));
    return EINVAL;
  }
  switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ: break;
    default:
      violation("post_send on QP %u: opcode %d (the fake does RDMA write[/imm], send[/imm] and RDMA read)", qp->qpn(),
                wr->opcode);
      return EINVAL;
  }
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) {
    violation("post_send on QP %u: num_sge %d outside 0..max_send_sge %u", qp->qpn(), wr->num_sge,
              qp->cap.max_send_sge);
    return EINVAL;
  }
  // The send queue is full, as on hardware: slots still held by requests whose completion (or a
  // later one's) has not been polled count, finished or not.
  const uint64_t released = qp->sq_released.load();
  if (qp->next_seq > released && qp->next_seq - released >= qp->cap.max_send_wr) return ENOMEM;
  if (wr->opcode == IBV_WR_RDMA_READ && qp->attrs.max_rd_atomic == 0) {
    refuse(
        "post_send of an RDMA read on QP %u, whose max_rd_atomic (read depth) is 0: it may have no read "
        "outstanding",
        qp->qpn());
    return EINVAL;
  }

  SendWr work;
  work.wr_id = wr->wr_id;
  work.opcode = wr->opcode;
  work.signaled = (wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
  work.imm = has_imm(wr->opcode) ? wr->imm_data : 0;
  if (is_rdma(wr->opcode)) {
    work.remote_addr = wr->wr.rdma.remote_addr;
    work.rkey = wr->wr.rdma.rkey;
  }
  for (int i = 0; i < wr->num_sge; ++i) work.length += wr->sg_list[i].length;
  if (work.length > qp->device()->spec.max_msg_sz) {
    violation("post_send on QP %u: %llu bytes exceed the port's max_msg_sz (%llu)", qp->qpn(),
              static_cast<unsigned long long>(work.length),
              static_cast<unsigned long long>(qp->device()->spec.max_msg_sz));
    return EINVAL;
  }
  if (wr->send_flags & IBV_SEND_INLINE) {
    if (wr->opcode == IBV_WR_RDMA_READ || work.length > qp->cap.max_inline_data) {
      violation("post_send on QP %u: IBV_SEND_INLINE of %llu bytes (%s; max_inline_data %u)", qp->qpn(),
                static_cast<unsigned long long>(work.length),
                wr->opcode == IBV_WR_RDMA_READ ? "an RDMA read cannot be inline" : "too long", qp->cap.max_inline_data);
      return EINVAL;
    }
    // Inline data is copied now and its lkey is not looked at, as hardware does.
    work.inline_copy = std::make_shared<std::vector<uint8_t>>();
    for (int i = 0; i < wr->num_sge; ++i) {
      const uint8_t* bytes = reinterpret_cast<const uint8_t*>(wr->sg_list[i].addr);
      work.inline_copy->insert(work.inline_copy->end(), bytes, bytes + wr->sg_list[i].length);
    }
  } else {
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& sge = wr->sg_list[i];
      if (sge.length == 0) continue;
      auto found = engine.mrs_by_lkey.find(sge.lkey);
      Mr* mr = found == engine.mrs_by_lkey.end() ? nullptr : found->second;
      const char* why = nullptr;
      uint8_t* host = nullptr;
      if (mr == nullptr || mr->destroyed) {
        why = "names no registered MR";
      } else if (mr->pd != qp->pd) {
        why = "is an MR of another PD";
      } else if (wr->opcode == IBV_WR_RDMA_READ && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
        why = "is an MR without LOCAL_WRITE, which an RDMA read's destination needs";
      } else if ((host = mr->translate(sge.addr, sge.length)) == nullptr) {
        why = "does not cover the sge";
      }
      if (why != nullptr) {
        violation("post_send wr_id %llu on QP %u: sge %d [0x%llx, +%u) lkey 0x%x %s",
                  static_cast<unsigned long long>(wr->wr_id), qp->qpn(), i, static_cast<unsigned long long>(sge.addr),
                  sge.length, sge.lkey, why);
        work.stage = SendWr::Stage::kDone;  // completes with a local protection error in its turn
        work.status = IBV_WC_LOC_PROT_ERR;
        break;
      }
      work.pieces.push_back({host, sge.length});
      work.pinned.push_back(mr);
    }
  }
  for (Mr* mr : work.pinned) ++mr->in_flight;
  work.seq = qp->next_seq++;
  work.posted_at = std::chrono::steady_clock::now();
  count_posted(wr->opcode, work.length);
  bool failed = work.stage == SendWr::Stage::kDone;
  qp->sq.push_back(std::move(work));
  if (failed) engine.complete_sends(qp);
  return 0;
}

int enqueue_recv(Engine& engine, Qp* qp, const ibv_recv_wr* wr) {
  if (qp->state == IBV_QPS_RESET) {
    violation("post_recv on QP %u in state RESET (needs INIT, RTR or RTS)", qp->qpn());
    return EINVAL;
  }
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge) {
    violation("post_recv on QP %u: num_sge %d outside 0..max_recv_sge %u", qp->qpn(), wr->num_sge,
              qp->cap.max_recv_sge);
    return EINVAL;
  }
  if (qp->rq.size() >= qp->cap.max_recv_wr) return ENOMEM;
  if (qp->state == IBV_QPS_ERR) {
    ibv_wc wc{};
    wc.wr_id = wr->wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qpn();
    engine.push_completion(qp->recv_cq, wc);
    return 0;
  }
  // The sges are checked when a SEND lands in them: a write-with-imm never looks at them.
  RecvWr work;
  work.wr_id = wr->wr_id;
  work.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
  qp->rq.push_back(std::move(work));
  return 0;
}

}  // namespace

int post_send(ibv_qp* verbs_qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* qp = impl_of<Qp>(verbs_qp);
  if (!usable_qp(qp, "post_send")) {
    *bad_wr = wr;
    return EINVAL;
  }
  Engine& engine = *qp->context->engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  for (; wr != nullptr; wr = wr->next) {
    int error = enqueue_send(engine, qp, wr);
    if (error != 0) {
      *bad_wr = wr;
      engine.wake();
      return error;
    }
  }
  engine.wake();
  return 0;
}

int post_recv(ibv_qp* verbs_qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* qp = impl_of<Qp>(verbs_qp);
  if (!usable_qp(qp, "post_recv")) {
    *bad_wr = wr;
    return EINVAL;
  }
  Engine& engine = *qp->context->engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  for (; wr != nullptr; wr = wr->next) {
    int error = enqueue_recv(engine, qp, wr);
    if (error != 0) {
      *bad_wr = wr;
      engine.wake();
      return error;
    }
  }
  engine.wake();  // a responder may be waiting for this receive
  return 0;
}

int poll_cq(ibv_cq* verbs_cq, int num_entries, ibv_wc* wc) {
  Cq* cq = impl_of<Cq>(verbs_cq);
  if (!owned_here(cq->context->engine, "a CQ")) return -1;
  if (cq->destroyed) {
    violation("poll_cq on destroyed CQ %p", static_cast<void*>(verbs_cq));
    return -1;
  }
  std::lock_guard<std::mutex> lock(cq->mu);
  int taken = 0;
  while (taken < num_entries && !cq->entries.empty()) {
    wc[taken++] = cq->entries.front();
    cq->entries.pop_front();
    const Cq::SlotRelease release = cq->releases.front();
    cq->releases.pop_front();
    if (release.qp == nullptr) continue;
    uint64_t now = release.qp->sq_released.load();
    while (now < release.through && !release.qp->sq_released.compare_exchange_weak(now, release.through)) {}
  }
  return taken;
}

int req_notify_cq(ibv_cq*, int) { return EOPNOTSUPP; }  // no completion channels: callers poll

namespace {
constexpr int kOpcodes = IBV_WR_DRIVER1 + 1;
std::atomic<uint64_t> g_posted_requests[kOpcodes];
std::atomic<uint64_t> g_posted_bytes[kOpcodes];
}  // namespace

void count_posted(ibv_wr_opcode opcode, uint64_t bytes) {
  if (opcode < 0 || opcode >= kOpcodes) return;
  g_posted_requests[opcode] += 1;
  g_posted_bytes[opcode] += bytes;
}

void posted_so_far(ibv_wr_opcode opcode, uint64_t* requests, uint64_t* bytes) {
  const bool known = opcode >= 0 && opcode < kOpcodes;
  *requests = known ? g_posted_requests[opcode].load() : 0;
  *bytes = known ? g_posted_bytes[opcode].load() : 0;
}

}  // namespace sieve::fake_verbs
