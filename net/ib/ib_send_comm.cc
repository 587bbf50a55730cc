// SPDX-License-Identifier: Apache-2.0
// The send comm's data path: announcements of the receiver's buffers, matching them with isends,
// and the RDMA writes (split across queue pairs) that carry each message.
#include "net/ib/ib_comm.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "net/ib/ib_comm_protocol.h"
#include "net/socket.h"

namespace sieve::net::ib {

Status IbSendComm::prepare() {
  for (uint32_t i = 0; i < kMaxRequests; ++i) {
    Status st = post_announce_receive(i);
    if (!st.ok()) return st;
  }
  return ok_status();
}

Status IbSendComm::post_announce_receive(uint32_t i) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(announce(i)), static_cast<uint32_t>(kAnnounceBytes), control_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = work_id(Work::kAnnounceRecv, i, 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return post_recv(0, &wr);
}

Status IbSendComm::isend(const void* data, size_t size, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (size > 0 && !data) return error(Code::kInvalidArgument, "isend of " + bytes_text(size) + " from a null buffer");
  if (size > config_.max_message_bytes)
    return error(Code::kInvalidUsage, "isend of " + bytes_text(size) + " to " + connection_.peer + ": " +
                                          config_.port.name + " carries at most " +
                                          bytes_text(config_.max_message_bytes) + " per message (its maxP2pBytes)");
  uint32_t lkey = 0;
  if (size > 0) {
    Status st = find_region("isend", data, size, &lkey, nullptr);
    if (!st.ok()) return st;
  }
  IbRequest* r = free_request();
  if (!r) return ok_status();  // kMaxRequests outstanding: NCCL retries
  r->kind = IbRequest::Kind::kSend;
  r->data = static_cast<char*>(const_cast<void*>(data));
  r->size = size;
  r->lkey = lkey;
  r->sequence = next_send_sequence_++;
  waiting_.push_back(r);
  *request = r;
  progress();
  match();
  return ok_status();
}

void IbSendComm::on_completion(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind == Work::kAnnounceRecv) {
    const uint32_t i = work_index(wc.wr_id);
    const uint8_t* m = announce(i);
    Slot slot{get64(m + 8), get64(m + 16), get64(m + 24), get32(m + 4)};
    if (get32(m) != kAnnounceMagic || wc.byte_len != kAnnounceBytes || slot.sequence != next_slot_sequence_) {
      failure_.set(error(Code::kRemoteError, "peer " + connection_.peer +
                                                 " announced a receive out of order or malformed "
                                                 "(sequence " +
                                                 std::to_string(slot.sequence) + ", expected " +
                                                 std::to_string(next_slot_sequence_) + ")"));
      return;
    }
    ++next_slot_sequence_;
    slots_.push_back(slot);
    Status st = post_announce_receive(i);  // at once: the peer may announce again as soon as a receive is done
    if (!st.ok()) failure_.set(st);
    return;
  }
  if (kind == Work::kWrite) {
    IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
    if (r.busy && r.kind == IbRequest::Kind::kSend && r.pending > 0) --r.pending;
    return;
  }
  if (failure_.failed()) return;
}

bool IbSendComm::landed_before_close(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind != Work::kWrite && kind != Work::kWriteData) return false;
  check_liveness(true);  // the goodbye, if the peer sent one, is on the socket already
  IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
  if (!peer_said_goodbye_ || !r.busy || r.kind != IbRequest::Kind::kSend || r.sequence >= peer_landed_) return false;
  // Landed: the flush or retry error only ends its work request (the data part counts for nothing).
  if (kind == Work::kWrite && r.pending > 0) --r.pending;
  return true;
}

void IbSendComm::match() {
  while (!waiting_.empty() && !slots_.empty() && !failure_.failed()) {
    IbRequest* r = waiting_.front();
    const Slot slot = slots_.front();
    waiting_.pop_front();
    slots_.pop_front();
    Status st = post_writes(r, slot);
    if (!st.ok()) failure_.set(st);
  }
}

Status IbSendComm::post_writes(IbRequest* r, const Slot& slot) {
  const int used = qps_for(slot.capacity, nqps());
  r->used_qps = used;
  r->too_large = r->size > slot.capacity;
  r->posted = true;
  if (r->too_large)
    r->error = error(Code::kInvalidUsage, "isend of " + bytes_text(r->size) + " to " + connection_.peer +
                                              " is larger than the receive it posted (" + bytes_text(slot.capacity) +
                                              "): a send larger than its receive is an error");
  // Each queue pair used carries its share of the message and one immediate: the receiver counts
  // immediates, so every used queue pair writes, even zero bytes. Under adaptive routing the
  // packets of one write may take different paths and arrive out of order, and a write's
  // immediate could be delivered before all of its data is placed: above adaptive_routing_bytes the
  // data goes as a plain write and the immediate in a zero-byte write behind it, which the
  // responder completes only after the earlier write (as NCCL's IB transport does).
  const uint32_t imm = r->too_large ? kImmTooLarge : static_cast<uint32_t>(r->size);
  const size_t share =
      r->too_large ? 0 : (((r->size + used - 1) / used + kQpSplitAlign - 1) / kQpSplitAlign) * kQpSplitAlign;
  const bool split = config_.adaptive_routing && r->size > config_.adaptive_routing_bytes;
  const std::vector<int> qps = take_qps(used);
  for (int i = 0; i < used; ++i) {
    const int q = qps[static_cast<size_t>(i)];
    const size_t offset = std::min(r->size, i * share);
    const size_t length = std::min(share, r->size - offset);
    ibv_sge sge{reinterpret_cast<uintptr_t>(r->data + offset), static_cast<uint32_t>(length), r->lkey};
    ibv_send_wr data{};
    ibv_send_wr wr{};
    wr.wr_id = work_id(Work::kWrite, r->index, q);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(imm);
    wr.wr.rdma.remote_addr = slot.address + offset;
    wr.wr.rdma.rkey = slot.rkey;
    ibv_send_wr* first = &wr;
    if (split && length > 0) {
      data.wr_id = work_id(Work::kWriteData, r->index, q);
      data.opcode = IBV_WR_RDMA_WRITE;
      data.sg_list = &sge;
      data.num_sge = 1;
      data.wr.rdma.remote_addr = slot.address + offset;
      data.wr.rdma.rkey = slot.rkey;
      data.next = &wr;
      first = &data;
    } else if (length > 0) {
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
    Status st = post_send(q, first);
    if (!st.ok()) return st;
    ++r->pending;
  }
  return ok_status();
}

Status IbSendComm::test(IbRequest* r, Completion* out) {
  *out = Completion{};
  if (!r->busy) return error(Code::kInvalidUsage, "test of a request that is not outstanding");
  progress();
  match();
  if (r->posted && r->pending == 0) {
    if (r->work_failed) {
      r->busy = false;
      return failure_.surface();
    }
    return r->too_large ? report(r, r->error) : finish(r, out);
  }
  if (failure_.failed()) {
    // Writes still queued finish as flushed (the queue pairs are in error) before the buffer is let go.
    if (r->posted && r->pending > 0 && flushes_will_come()) return ok_status();
    r->busy = false;
    return failure_.surface();
  }
  return ok_status();
}

}  // namespace sieve::net::ib
