// SPDX-License-Identifier: Apache-2.0
#include "net/socket.h"

#include <fcntl.h>
// linux/tcp.h rather than netinet/tcp.h: its tcp_info has tcpi_snd_wnd (Linux 6.2 and later fill it).
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <random>

namespace sieve::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int err) { return std::strerror(err); }

namespace {

Status sys_error(const std::string& what, int err) { return error(Code::kSystemError, what + ": " + errno_text(err)); }

}  // namespace

Status make_listener(const SocketAddress& address, Fd* out, SocketAddress* bound) {
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  SocketAddress local = address;
  local.set_port(0);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local.storage), local.length) != 0)
    return sys_error("bind " + local.text(), errno);
  if (::listen(fd.get(), 256) != 0) return sys_error("listen", errno);
  // Every peer speaks first (its hello), so the kernel hands over a connection only once its first
  // bytes are there: a socket that says nothing never takes a place among the listener's pending
  // sockets for the defer period, and a real connector's sockets arrive with their hellos, even
  // over a link with delay, where they were accepted before and a flood could push them out first.
  const int defer_s = kDeferAcceptSeconds;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
  *bound = local;
  socklen_t len = sizeof(bound->storage);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->storage), &len) != 0)
    return sys_error("getsockname", errno);
  bound->length = len;
  *out = std::move(fd);
  return ok_status();
}

Status start_connect(const SocketAddress& address, Fd* out) {
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0 &&
      errno != EINPROGRESS)
    return error(Code::kRemoteError, "connect to " + address.text() + ": " + errno_text(errno));
  *out = std::move(fd);
  return ok_status();
}

int connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

Status accept_one(int listen_fd, Fd* out, SocketAddress* peer, bool* got_one) {
  *got_one = false;
  peer->length = sizeof(peer->storage);
  int fd =
      ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer->storage), &peer->length, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    // A client that vanished between SYN and accept is its own problem, not the listener's.
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO) return ok_status();
    return sys_error("accept", err);
  }
  *got_one = true;
  out->reset(fd);
  return ok_status();
}

void tune_connection(int fd, int peer_timeout_ms) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = std::max(1, peer_timeout_ms / 2000);
  int interval = 1;
  int count = std::max(1, peer_timeout_ms / 2000);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void AckWatch::wrote() {
  last_write_ms_ = steady_ms();
  unanswered_since_ms_ = -1;
}

int AckWatch::remaining_ms(int timeout_ms) const {
  if (unanswered_since_ms_ < 0) return timeout_ms;
  return static_cast<int>(std::max<int64_t>(0, unanswered_since_ms_ + timeout_ms - steady_ms()));
}

Status AckWatch::check(int fd, int timeout_ms, const std::string& peer) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return ok_status();  // cannot tell: not dead
  // What tells a live receiver from a vanished one: a live receiver that stops reading closes its
  // window; one that reads acknowledges. Data waiting behind an open window with no acknowledgement
  // is a vanished host or a cut network, whichever side drops the packets: retransmissions are not
  // required, because packets the sender's own host drops (a black-holed namespace, a qdisc) are
  // never counted as retransmitted. Kernels that do not report the window (before 6.2) fall back to
  // retransmissions, which exclude window probes.
  const bool window_known = length >= offsetof(tcp_info, tcpi_snd_wnd) + sizeof(info.tcpi_snd_wnd);
  const bool waiting = unacknowledged_bytes(fd) > 0;
  const bool unanswered = waiting && (window_known ? info.tcpi_snd_wnd > 0 : info.tcpi_retransmits > 0);
  if (!unanswered) {
    reset();
    return ok_status();
  }
  const int64_t now = steady_ms();
  // Unanswered since the later of the last acknowledgement and the last write (or, where the caller
  // does not say when it wrote, the last new data the kernel sent): not from when a check first saw
  // it, which made a 5 s bound 7 s. Never before the last write: an idle connection's last
  // acknowledgement may be old, its new data is not.
  if (unanswered_since_ms_ < 0) {
    const int64_t written = last_write_ms_ >= 0 ? last_write_ms_ : now - static_cast<int64_t>(info.tcpi_last_data_sent);
    unanswered_since_ms_ = std::max(now - static_cast<int64_t>(info.tcpi_last_ack_recv), written);
  }
  if (now - unanswered_since_ms_ >= timeout_ms)
    return error(Code::kRemoteError, "peer " + peer + " acknowledged nothing for " +
                                         std::to_string(now - unanswered_since_ms_) +
                                         " ms (its host is down or the network is cut; SIEVE_PEER_TIMEOUT_MS)");
  return ok_status();
}

int unacknowledged_bytes(int fd) {
  int bytes = 0;
  return ::ioctl(fd, SIOCOUTQ, &bytes) == 0 ? bytes : 0;
}

IoResult write_some(int fd, const iovec* iov, int count) {
  IoResult r;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = count;
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      r.bytes = static_cast<size_t>(n);
      return r;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) r.would_block = true;
    else r.error = errno;
    return r;
  }
}

IoResult read_some(int fd, const iovec* iov, int count) {
  IoResult r;
  for (;;) {
    ssize_t n = ::readv(fd, iov, count);
    if (n > 0) {
      r.bytes = static_cast<size_t>(n);
      return r;
    }
    if (n == 0) {
      r.closed = true;
      return r;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) r.would_block = true;
    else r.error = errno;
    return r;
  }
}

int advance_iov(iovec* iov, int count, size_t bytes) {
  int i = 0;
  while (i < count && bytes >= iov[i].iov_len) {
    bytes -= iov[i].iov_len;
    iov[i].iov_len = 0;
    ++i;
  }
  if (i < count) {
    iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + bytes;
    iov[i].iov_len -= bytes;
  }
  return i;
}

Status read_message(int fd, PartialMessage* m, const std::string& peer) {
  while (!m->complete()) {
    iovec v{m->data + m->done, m->size - m->done};
    IoResult r = read_some(fd, &v, 1);
    if (r.would_block) return ok_status();
    if (r.closed) return error(Code::kRemoteError, "peer " + peer + " closed the connection during the handshake");
    if (r.error) return error(Code::kRemoteError, "reading from " + peer + ": " + errno_text(r.error));
    m->done += r.bytes;
  }
  return ok_status();
}

Status write_message(int fd, PartialMessage* m, const std::string& peer) {
  while (!m->complete()) {
    iovec v{m->data + m->done, m->size - m->done};
    IoResult r = write_some(fd, &v, 1);
    if (r.would_block) return ok_status();
    if (r.error) return error(Code::kRemoteError, "writing to " + peer + ": " + errno_text(r.error));
    m->done += r.bytes;
  }
  return ok_status();
}

uint64_t random64() {
  uint64_t value = 0;
  if (::getrandom(&value, sizeof(value), 0) == sizeof(value)) return value;
  // getrandom cannot fail for 8 bytes once the pool is initialised; keep a fallback anyway.
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return (uint64_t(rd()) << 32 ^ rd()) + counter.fetch_add(0x9e3779b97f4a7c15ull) +
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace sieve::net
