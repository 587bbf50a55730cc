// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_establish.h"

#include <algorithm>

#include "net/log.h"
#include "net/socket.h"

namespace sieve::net::ib {

namespace {
// Both sides are past the handshake, so each answers as soon as NCCL calls connect or accept
// again; a slow rank may still take a while to do so.
constexpr int kMinSetupWaitMs = 30000;
constexpr uint8_t kReady = 0x52;  // 'R'
}  // namespace

Establishment::Establishment(Role role, IbCommConfig config, Connection connection)
    : role_(role),
      config_(std::move(config)),
      connection_(std::move(connection)),
      peer_(connection_.peer),
      deadline_(Clock::now() + std::chrono::milliseconds(std::max(config_.peer_timeout_ms, kMinSetupWaitMs))),
      stage_(role == Role::kConnector ? Stage::kSendSetup : Stage::kReadSetup) {}

IbComm* Establishment::comm() const {
  if (send_) return send_.get();
  if (recv_) return recv_.get();
  return nullptr;
}

int Establishment::fd() const { return comm() ? comm()->socket() : connection_.control.get(); }

Status Establishment::create_comm(int nqps) {
  config_.nqps = nqps;
  Status st = refresh_port_gid();
  if (!st.ok()) return st;
  if (role_ == Role::kConnector) {
    send_ = std::make_unique<IbSendComm>(config_, std::move(connection_));
    st = send_->create();
  } else {
    recv_ = std::make_unique<IbRecvComm>(config_, std::move(connection_));
    st = recv_->create();
  }
  return st;
}

// The GID table may have changed since the transport started (an address added or removed): a
// queue pair whose source GID entry is gone is refused at RTR, and one whose address moved is
// unreachable. Each connection reads the table again and takes the GID the policy picks now.
Status Establishment::refresh_port_gid() {
  if (!config_.port_info) return ok_status();
  const int before = config_.port.gid_index;
  Status st = refresh_gid(config_.device->verbs(), config_.device->context(), *config_.port_info, config_.gid_policy,
                          &config_.port);
  if (!st.ok()) return error(st.code(), "connection with " + peer_ + ": " + st.message());
  if (config_.port.gid_index != before)
    SIEVE_INFO("%s: GID index %d now (was %d: the GID table changed), for the connection with %s",
               config_.port.name.c_str(), config_.port.gid_index, before, peer_.c_str());
  return ok_status();
}

Status Establishment::write_pending(bool* complete) {
  *complete = false;
  while (out_done_ < out_.size()) {
    iovec iov{out_.data() + out_done_, out_.size() - out_done_};
    IoResult r = write_some(fd(), &iov, 1);
    if (r.failed()) return error(Code::kRemoteError, "queue-pair set-up with " + peer_ + ": " + errno_text(r.error));
    if (r.would_block) return ok_status();
    out_done_ += r.bytes;
  }
  *complete = true;
  return ok_status();
}

Status Establishment::read_into(size_t wanted, bool* complete) {
  *complete = false;
  in_.resize(wanted);
  while (in_done_ < wanted) {
    iovec iov{in_.data() + in_done_, wanted - in_done_};
    IoResult r = read_some(fd(), &iov, 1);
    if (r.closed) return error(Code::kRemoteError, "peer " + peer_ + " closed the connection during queue-pair set-up");
    if (r.failed()) return error(Code::kRemoteError, "queue-pair set-up with " + peer_ + ": " + errno_text(r.error));
    if (r.would_block) return ok_status();
    in_done_ += r.bytes;
  }
  *complete = true;
  in_done_ = 0;
  return ok_status();
}

Status Establishment::progress(bool* done) {
  *done = false;
  bool complete = false;
  Status st;
  if (stage_ == Stage::kSendSetup) {
    if (out_.empty()) {
      if (role_ == Role::kConnector) {
        st = create_comm(config_.nqps);
        if (!st.ok()) return st;
      }
      out_.resize(kSetupBytes);
      encode_setup(comm()->local_setup(), out_.data());
      out_done_ = 0;
    }
    st = write_pending(&complete);
    if (!st.ok()) return st;
    if (complete && !refusal_.ok()) return refusal_;
    if (complete) stage_ = role_ == Role::kConnector ? Stage::kReadSetup : Stage::kReadReady;
  }
  if (stage_ == Stage::kReadSetup) {
    st = read_into(kSetupBytes, &complete);
    if (!st.ok()) return st;
    if (complete) {
      SetupInfo remote;
      st = decode_setup(in_.data(), &remote);
      if (!st.ok()) return error(st.code(), st.message() + " (from " + peer_ + ")");
      if (role_ == Role::kListener) {
        // The connector chose SIEVE_IB_QPS and the service class: one class both ways.
        config_.service = remote.service;
        st = create_comm(static_cast<int>(remote.qpn.size()));
        if (!st.ok()) return st;
        // A peer this side cannot reach still gets the answer, so it can say why too; the
        // queue pairs stay unconnected and the refusal follows the answer.
        refusal_ = comm()->check_peer(remote);
      }
      if (refusal_.ok()) st = comm()->connect(remote);
      if (!st.ok()) return st;
      out_.clear();
      if (role_ == Role::kConnector) {
        out_.push_back(kReady);
        out_done_ = 0;
        stage_ = Stage::kSendReady;
      } else {
        stage_ = Stage::kSendSetup;  // answers with its own set-up, its queue pairs already connected
        return progress(done);
      }
    }
  }
  if (stage_ == Stage::kSendReady) {
    st = write_pending(&complete);
    if (!st.ok()) return st;
    if (complete) stage_ = Stage::kDone;
  }
  if (stage_ == Stage::kReadReady) {
    st = read_into(1, &complete);
    if (!st.ok()) return st;
    if (complete) {
      if (in_[0] != kReady)
        return error(Code::kRemoteError, "peer " + peer_ + " broke the queue-pair set-up (no ready mark)");
      stage_ = Stage::kDone;
    }
  }
  if (stage_ == Stage::kDone) {
    *done = true;
    return ok_status();
  }
  if (Clock::now() > deadline_)
    return error(Code::kRemoteError, "queue-pair set-up with " + peer_ + " did not finish within " +
                                         std::to_string(std::max(config_.peer_timeout_ms, kMinSetupWaitMs)) + " ms");
  return ok_status();
}

}  // namespace sieve::net::ib
