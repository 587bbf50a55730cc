// SPDX-License-Identifier: Apache-2.0
// One side's queue-pair set-up over the connection the shared handshake authenticated, as a
// non-blocking state machine driven by connect/accept. The connector sends its set-up first; the
// listener adopts its queue-pair count, connects its queue pairs (RTR, RTS, receives posted) and
// answers; the connector connects and sends one "ready" byte. Only then does the listener hand out
// its comm, so neither side ever sends to a queue pair that is not ready for it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "net/connection.h"
#include "net/ib/ib_comm.h"

namespace sieve::net::ib {

class Establishment {
 public:
  enum class Role { kConnector, kListener };
  Establishment(Role role, IbCommConfig config, Connection connection);

  // *done turns true once the comm is ready; take it with take_send / take_recv (by role).
  Status progress(bool* done);
  std::unique_ptr<IbSendComm> take_send() { return std::move(send_); }
  std::unique_ptr<IbRecvComm> take_recv() { return std::move(recv_); }
  const std::string& peer() const { return peer_; }

 private:
  enum class Stage { kSendSetup, kReadSetup, kSendReady, kReadReady, kDone };
  IbComm* comm() const;
  int fd() const;
  Status create_comm(int nqps);
  Status refresh_port_gid();
  Status write_pending(bool* complete);
  Status read_into(size_t wanted, bool* complete);

  const Role role_;
  IbCommConfig config_;
  Connection connection_;  // until the comm takes it
  const std::string peer_;
  const Clock::time_point deadline_;
  Stage stage_;
  std::unique_ptr<IbSendComm> send_;
  std::unique_ptr<IbRecvComm> recv_;
  std::vector<uint8_t> out_;
  size_t out_done_ = 0;
  std::vector<uint8_t> in_;
  size_t in_done_ = 0;
  Status refusal_;  // listener: why this peer cannot be connected, reported after answering it
};

}  // namespace sieve::net::ib
