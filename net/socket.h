// SPDX-License-Identifier: Apache-2.0
// Thin RAII and error handling over POSIX sockets. Every socket Sieve makes is non-blocking; the
// helpers here never wait, they report how far they got.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "net/devices.h"
#include "net/status.h"

namespace sieve::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A listener's connections are handed over once their first bytes arrived (TCP_DEFER_ACCEPT), or
// after about this long without any (the kernel's SYN-ACK retransmits decide when exactly).
constexpr int kDeferAcceptSeconds = 2;
// Listening socket on `address` (port 0: any), non-blocking; *bound gets the real port.
Status make_listener(const SocketAddress& address, Fd* out, SocketAddress* bound);
// Starts a non-blocking connect; completion is seen as writability, then connect_error().
Status start_connect(const SocketAddress& address, Fd* out);
// 0 when the connect finished, else the errno it failed with.
int connect_error(int fd);
Status accept_one(int listen_fd, Fd* out, SocketAddress* peer, bool* got_one);

// Socket options for an established connection: no Nagle, kernel keepalive (a vanished host fails
// an idle connection within peer_timeout_ms). Buffer sizes stay Linux's to tune: an explicit SO_SNDBUF or
// SO_RCVBUF would switch its autotuning off for the socket. No TCP_USER_TIMEOUT: Linux
// aborts a connection whose zero window outlives it, and a receiver that is merely slow (starved of
// CPU, or not posting its receive yet) closes its window. AckWatch covers a vanished host instead.
void tune_connection(int fd, int peer_timeout_ms);

// Tells a vanished host from a slow receiver while data waits to be sent or acknowledged: a live
// receiver that stops reading closes its window (the sender then only probes it), a vanished host
// leaves data in flight unacknowledged and the sender retransmits. Check while a send is blocked, and
// while written data is unacknowledged; mark every write (wrote). The peer is dead once data has gone
// unanswered for timeout_ms, counted from the later of its last acknowledgement and the last write,
// so the bound is timeout_ms (plus the caller's polling step), whenever the first retransmission came.
// (A host that vanishes while its window is closed is left to the kernel's probe limit.)
class AckWatch {
 public:
  // An error once the peer has left retransmitted data unacknowledged for timeout_ms.
  Status check(int fd, int timeout_ms, const std::string& peer);
  // Milliseconds until check() would fail if nothing changes (timeout_ms while nothing is unanswered).
  int remaining_ms(int timeout_ms) const;
  void wrote();
  void reset() { unanswered_since_ms_ = -1; }

 private:
  int64_t unanswered_since_ms_ = -1;
  int64_t last_write_ms_ = -1;
};

// Bytes written to `fd` and not yet acknowledged by the peer (SIOCOUTQ); 0 when it cannot tell.
int unacknowledged_bytes(int fd);

// Outcome of one non-blocking read or write.
struct IoResult {
  size_t bytes = 0;
  bool would_block = false;
  bool closed = false;  // orderly EOF on read
  int error = 0;        // errno of a hard failure

  bool failed() const { return closed || error != 0; }
};
IoResult write_some(int fd, const iovec* iov, int count);
IoResult read_some(int fd, const iovec* iov, int count);

// Advances an iovec array past `bytes` already transferred; returns the first non-empty entry.
int advance_iov(iovec* iov, int count, size_t bytes);

// Fixed-size handshake message read or written piecewise across calls.
struct PartialMessage {
  uint8_t data[80];  // the largest handshake message, the hello (net/wire.h)
  size_t size = 0;
  size_t done = 0;
  bool complete() const { return done == size; }
};
// Status is not-ok on a hard failure or EOF; check complete() for progress.
Status read_message(int fd, PartialMessage* m, const std::string& peer);
Status write_message(int fd, PartialMessage* m, const std::string& peer);

uint64_t random64();
std::string errno_text(int err);

}  // namespace sieve::net
