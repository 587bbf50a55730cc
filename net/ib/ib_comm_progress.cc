// SPDX-License-Identifier: Apache-2.0
// What keeps a verbs comm going and notices when it cannot: polling the completion queue, the
// liveness socket and the device's events, and recording the first failure (after which every
// queue pair goes to the error state).
#include "net/ib/ib_comm.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "net/ib/completion_error.h"
#include "net/ib/ib_comm_protocol.h"
#include "net/log.h"
#include "net/socket.h"

namespace sieve::net::ib {

void IbComm::progress() {
  ibv_wc wcs[16];
  for (int round = 0; round < 8; ++round) {
    const int n = ibv_poll_cq(cq_, 16, wcs);
    if (n < 0) {
      failure_.set(error(Code::kSystemError, "ibv_poll_cq failed on the comm to " + connection_.peer));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        if (landed_before_close(wc)) continue;
        // The first error completion fails the comm; the ones it flushes after it add nothing.
        failure_.set(error(Code::kSystemError, describe_failed(wc)));
        if (IbRequest* r = request_of(wc)) {
          r->work_failed = true;
          // An unsignaled data write is not pending: the write with its immediate, queued behind
          // it on the queue pair now in error, completes (flushed) and ends the count.
          if (r->pending > 0 && work_kind(wc.wr_id) != Work::kWriteData) --r->pending;
        }
        continue;
      }
      // After a failure only what frees a request's buffer still counts.
      if (!failure_.failed() || request_of(wc)) on_completion(wc);
    }
    if (n < 16) break;
  }
  check_liveness();
  check_device();
  if (failure_.failed()) enter_error();
}

std::string IbComm::describe_failed(const ibv_wc& wc) const {
  CompletionErrorContext context;
  context.work = work_name(work_kind(wc.wr_id));
  context.peer = connection_.peer;
  context.port = config_.port.name;
  context.local_gid = config_.port.gid;
  context.retry = config_.retry;
  if (loopback_ && wc.qp_num == loopback_->qp_num) {  // the flush read: to itself
    context.remote_gid = config_.port.gid;
    context.remote_qpn = wc.qp_num;
  } else {
    context.remote_gid = remote_gid_;
    for (size_t q = 0; q < qps_.size() && q < remote_qpns_.size(); ++q)
      if (qps_[q]->qp_num == wc.qp_num) context.remote_qpn = remote_qpns_[q];
  }
  return describe_completion_error(wc, verbs().wc_status_str(wc.status), context);
}

void IbComm::check_device() {
  const Clock::time_point now = Clock::now();
  if (now < next_device_check_ || device_lost_) return;
  next_device_check_ = now + DeviceContext::kEventInterval;
  Status st = config_.device->health(device_objects_);
  if (st.ok()) return;
  device_lost_ = config_.device->lost();
  failure_.set(error(st.code(), st.message() + " (comm with " + connection_.peer + ")"));
}

IbRequest* IbComm::request_of(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind != Work::kWrite && kind != Work::kWriteData && kind != Work::kFlushRead) return nullptr;
  IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
  return r.busy ? &r : nullptr;
}

void IbComm::enter_error() {
  if (in_error_) return;
  in_error_ = true;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  for (ibv_qp* qp : qps_) verbs().modify_qp(qp, &attr, IBV_QP_STATE);
  if (loopback_) verbs().modify_qp(loopback_, &attr, IBV_QP_STATE);
}

void IbComm::check_liveness(bool now_please) {
  const Clock::time_point now = Clock::now();
  if (!now_please && now < next_liveness_check_) return;
  next_liveness_check_ = now + kLivenessInterval;
  while (!peer_closed_) {
    const int fd = connection_.control.get();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    ssize_t n = 0;
    if (expects_goodbye_ && !peer_said_goodbye_) {
      n = ::recv(fd, goodbye_ + goodbye_read_, kGoodbyeBytes - goodbye_read_, MSG_DONTWAIT);
      if (n > 0) {
        goodbye_read_ += static_cast<size_t>(n);
        if (goodbye_read_ < kGoodbyeBytes) continue;
        if (get32(goodbye_) != kGoodbyeMagic) {
          failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " sent a malformed goodbye"));
          return;
        }
        peer_said_goodbye_ = true;
        peer_landed_ = get64(goodbye_ + 4);
        continue;
      }
    } else {
      char byte = 0;
      n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) {
        failure_.set(error(
            Code::kRemoteError,
            "peer " + connection_.peer + " sent bytes on the verbs liveness socket, which carries none after set-up"));
        return;
      }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    peer_closed_ = true;
    peer_closed_at_ = now;
    peer_closed_reason_ = n == 0 ? (peer_said_goodbye_ ? "closed its receive comm" : "closed the connection")
                                 : "connection failed: " + errno_text(errno);
  }
  if (now - peer_closed_at_ >= kCloseGrace)
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " " + peer_closed_reason_ +
                                               " (its process ended or its comm was closed)"));
}

Status IbComm::finish(IbRequest* request, Completion* out) {
  out->done = true;
  out->size = request->kind == IbRequest::Kind::kFlush ? 0 : request->size;
  out->wire_bytes = out->size;
  out->sent = request->kind == IbRequest::Kind::kSend;
  out->message = request->kind != IbRequest::Kind::kFlush;
  request->busy = false;
  return ok_status();
}

Status IbComm::report(IbRequest* request, const Status& status) {
  request->busy = false;
  SIEVE_WARN("%s", status.message().c_str());
  return status;
}

Status IbComm::fail(const Status& status) {
  failure_.set(status);
  return failure_.surface();
}

}  // namespace sieve::net::ib
