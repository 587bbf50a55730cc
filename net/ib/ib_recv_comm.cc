// SPDX-License-Identifier: Apache-2.0
// The receive comm's data path: posting receives and announcing their buffers to the sender,
// counting the immediates that complete them, the flush of GPU writes, and the goodbye it leaves the
// sender when it closes.
#include "net/ib/ib_comm.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/ib/ib_comm_protocol.h"
#include "net/socket.h"

namespace sieve::net::ib {

IbRecvComm::~IbRecvComm() {
  // Tell the sender which messages landed: their writes' acknowledgements may go with the queue
  // pairs destroyed next (or with this process). Best effort: a full socket or a dead peer drops it.
  if (qps_.size() && !failure_.failed()) {
    progress();
    uint8_t goodbye[kGoodbyeBytes];
    put32(goodbye, kGoodbyeMagic);
    put64(goodbye + 4, landed_);
    (void)::send(connection_.control.get(), goodbye, sizeof goodbye, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void IbRecvComm::landed(uint64_t sequence) {
  landed_ahead_.insert(sequence);
  while (!landed_ahead_.empty() && *landed_ahead_.begin() == landed_) {
    landed_ahead_.erase(landed_ahead_.begin());
    ++landed_;
  }
}

Status IbRecvComm::prepare() {
  if (config_.gpu_flush) {
    Status st = create_loopback();
    if (!st.ok()) return st;
  }
  expecting_.resize(nqps());
  for (int q = 0; q < nqps(); ++q) {
    for (int i = 0; i < kRecvDepth; ++i) {
      Status st = post_data_receive(q);
      if (!st.ok()) return st;
    }
  }
  return ok_status();
}

Status IbRecvComm::post_data_receive(int qp) {
  // An RDMA write with immediate consumes a receive but places nothing through it: no buffer.
  ibv_recv_wr wr{};
  wr.wr_id = work_id(Work::kDataRecv, 0, qp);
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  return post_recv(qp, &wr);
}

Status IbRecvComm::irecv(void* data, size_t capacity, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (capacity > 0 && !data)
    return error(Code::kInvalidArgument, "irecv of " + bytes_text(capacity) + " into a null buffer");
  uint32_t rkey = 0;
  if (capacity > 0) {
    Status st = find_region("irecv", data, capacity, nullptr, &rkey);
    if (!st.ok()) return st;
  }
  if (sends_in_flight_ >= kSendDepth) progress();
  if (sends_in_flight_ >= kSendDepth) return ok_status();  // announcements not yet acknowledged: retry
  IbRequest* r = free_request();
  if (!r) return ok_status();
  r->kind = IbRequest::Kind::kRecv;
  r->data = static_cast<char*>(data);
  r->capacity = capacity;
  r->sequence = next_sequence_++;
  r->used_qps = qps_for(capacity, nqps());
  r->pending = r->used_qps;
  for (int q : take_qps(r->used_qps)) expecting_[static_cast<size_t>(q)].push_back(r);
  uint8_t* m = announce(r->index);
  put32(m, kAnnounceMagic);
  put32(m + 4, rkey);
  put64(m + 8, r->sequence);
  put64(m + 16, reinterpret_cast<uintptr_t>(data));
  put64(m + 24, capacity);
  ibv_sge sge{reinterpret_cast<uintptr_t>(m), static_cast<uint32_t>(kAnnounceBytes), control_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = work_id(Work::kAnnounceSend, r->index, 0);
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  Status st = post_send(0, &wr);
  if (!st.ok()) return fail(st);
  ++sends_in_flight_;
  *request = r;
  progress();
  return ok_status();
}

void IbRecvComm::on_completion(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind == Work::kAnnounceSend) {
    --sends_in_flight_;
    return;
  }
  if (kind == Work::kFlushRead) {
    IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
    if (r.busy && r.kind == IbRequest::Kind::kFlush) r.pending = 0;
    return;
  }
  if (kind != Work::kDataRecv || failure_.failed()) return;
  const int q = work_qp(wc.wr_id);
  Status st = post_data_receive(q);  // at once: the peer may write again as soon as it has a slot
  if (!st.ok()) {
    failure_.set(st);
    return;
  }
  if (q >= nqps() || expecting_[q].empty() || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " wrote on queue pair " + std::to_string(q) +
                                               " with no receive expecting it"));
    return;
  }
  IbRequest* r = expecting_[q].front();
  expecting_[q].pop_front();
  const uint32_t imm = be32toh(wc.imm_data);
  if (imm & kImmTooLarge) {
    r->too_large = true;
  } else if (r->pending < r->used_qps && r->size != imm) {
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " announced two sizes for one message (" +
                                               std::to_string(r->size) + " and " + std::to_string(imm) + ")"));
    return;
  } else {
    r->size = imm;
  }
  if (--r->pending == 0) landed(r->sequence);
}

Status IbRecvComm::test(IbRequest* r, Completion* out) {
  *out = Completion{};
  if (!r->busy) return error(Code::kInvalidUsage, "test of a request that is not outstanding");
  progress();
  if (r->kind == IbRequest::Kind::kFlush) {
    // Its read references the region: it ends (done or flushed) before the region may go.
    if (r->pending == 0 && !r->work_failed) return finish(r, out);
    if (r->pending > 0 && (!failure_.failed() || flushes_will_come())) return ok_status();
    r->busy = false;
    return failure_.surface();
  }
  if (r->pending == 0) {
    if (r->too_large)
      return report(r, error(Code::kInvalidUsage,
                             "peer " + connection_.peer + " sent a message larger than the " + bytes_text(r->capacity) +
                                 " receive posted for it: a send larger than its receive is an error"));
    if (r->kind == IbRequest::Kind::kRecv && r->size > r->capacity)
      return report(r, error(Code::kRemoteError, "peer " + connection_.peer + " wrote " + bytes_text(r->size) +
                                                     " into a " + bytes_text(r->capacity) + " receive"));
    return finish(r, out);
  }
  if (failure_.failed()) {
    r->busy = false;
    return failure_.surface();
  }
  return ok_status();
}

Status IbRecvComm::create_loopback() {
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = verbs().create_qp(config_.device->pd(), &init);
  if (!qp)
    return error(Code::kSystemError,
                 "ibv_create_qp (flush loopback) on " + config_.device->name() + " failed: " + errno_text(errno));
  Status st = qp_to_init(verbs(), qp, config_.port);
  SetupInfo self = local_setup();
  const uint32_t psn = random_psn();
  if (st.ok()) st = qp_to_rts(verbs(), qp, config_.port, psn, self, qp->qp_num, psn, config_.service, config_.retry);
  if (!st.ok()) {
    verbs().destroy_qp(qp);
    return error(st.code(), st.message() + " (flush loopback on " + config_.port.name + ")");
  }
  loopback_ = qp;
  device_objects_.push_back(qp);
  return ok_status();
}

Status IbRecvComm::flush(void* data, size_t size, MemoryRegion* region, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  auto* ib_region = dynamic_cast<IbRegion*>(region);
  // Host memory is coherent with the NIC's writes: only GPU memory needs the read.
  if (!ib_region || !ib_region->gpu() || size == 0) return ok_status();
  if (!ib_region->covers(reinterpret_cast<uintptr_t>(data), size))
    return error(Code::kInvalidUsage, "flush: the " + bytes_text(size) + " are not inside the region given");
  if (!loopback_)  // GPU memory registered where the transport did not report taking it
    return error(Code::kInvalidUsage, "flush on the comm from " + connection_.peer + ": " + config_.port.name +
                                          " was not reported to take GPU memory, so the comm has no flush queue pair");
  IbRequest* r = free_request();
  if (!r)
    return error(Code::kInternalError, "flush on the comm from " + connection_.peer + ": " +
                                           std::to_string(kMaxRequests) + " requests already outstanding");
  r->kind = IbRequest::Kind::kFlush;
  r->pending = 1;
  // Reading back a few bytes through the NIC orders the NIC's earlier writes into that memory
  // before the read's completion (what NCCL does for GPUDirect RDMA).
  ibv_sge sge{reinterpret_cast<uintptr_t>(flush_target()), static_cast<uint32_t>(std::min<size_t>(size, 4)),
              control_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = work_id(Work::kFlushRead, r->index, 0);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
  wr.wr.rdma.rkey = ib_region->rkey();
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(loopback_, &wr, &bad);
  if (rc != 0) {
    r->busy = false;
    return fail(
        error(Code::kSystemError, "ibv_post_send (flush read) on " + config_.port.name + " failed: " + errno_text(rc)));
  }
  *request = r;
  return ok_status();
}

}  // namespace sieve::net::ib
