// SPDX-License-Identifier: Apache-2.0
#include "net/tcp/stripe_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/log.h"

namespace sieve::net {

namespace {
// Bytes a receiving helper waits for before it wakes (capped by what the current stripe still
// needs): about one wake-up per stripe instead of one per arriving burst. Measured with sieve-perf
// on veth shaped to 1 Gbit/s: Sieve's CPU per GB fell from ~0.66-0.85 s (128K) to ~0.54-0.63 s (512K).
// The kernel grows the receive buffer to hold it, so the sender never stalls on it.
constexpr size_t kReceiveBatch = 512 * 1024;

// Most iovecs one sendmsg/readv carries: a plain stripe takes two (chunk header, payload), so up to
// eight stripes (4 MiB at the default 512K chunk) move in one system call.
constexpr int kMaxBatchIov = 16;

// A paced sender waits for at least this much budget, so pacing never degrades into tiny writes.
constexpr size_t kMinPacedWrite = 64 * 1024;
constexpr std::chrono::milliseconds kMaxPaceWait{10};  // then the worker rechecks failures and new work

size_t iov_bytes(const iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

// Everything this stripe puts on the wire (so far as known: a receiver learns a codec frame's size
// from its header).
size_t stripe_total(const Stripe& s) {
  size_t body = s.codec ? (s.prepared ? s.body_length : 0) : s.length;
  return wire::kChunkHeaderBytes + s.codec_header_length + body;
}

// The not-yet-moved part of the stripe's segments: chunk header, codec header, body.
int remaining_iov(const Stripe& s, iovec* iov) {
  struct Segment {
    const void* base;
    size_t length;
  } segments[3] = {{s.header, wire::kChunkHeaderBytes},
                   {s.codec_header, s.codec_header_length},
                   {s.codec ? s.body : s.data, s.codec ? (s.prepared ? s.body_length : 0) : s.length}};
  size_t skip = s.moved;
  int count = 0;
  for (const Segment& g : segments) {
    if (skip >= g.length) {
      skip -= g.length;
      continue;
    }
    iov[count++] = {const_cast<char*>(static_cast<const char*>(g.base)) + skip, g.length - skip};
    skip = 0;
  }
  return count;
}

void truncate_iov(iovec* iov, int* count, size_t limit) {
  for (int i = 0; i < *count; ++i) {
    if (iov[i].iov_len >= limit) {
      iov[i].iov_len = limit;
      *count = i + 1;
      return;
    }
    limit -= iov[i].iov_len;
  }
}
}  // namespace

bool Failure::set(const Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_.load(std::memory_order_relaxed)) return false;
  status_ = status;
  failed_.store(true, std::memory_order_release);
  return true;
}

Status Failure::get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

Status Failure::surface() {
  Status st = get();
  if (!surfaced_.exchange(true)) SIEVE_WARN("%s", st.message().c_str());
  return st;
}

StripeWorker::StripeWorker(Direction direction, std::vector<int> sockets, int watch_fd, Failure* failure,
                           std::string peer, int peer_timeout_ms, TransportOptions::Codec codec,
                           RateLimiter* rate_limiter)
    : direction_(direction),
      sockets_(std::move(sockets)),
      watch_fd_(watch_fd),
      failure_(failure),
      peer_(std::move(peer)),
      peer_timeout_ms_(peer_timeout_ms),
      codec_(codec),
      rate_limiter_(rate_limiter),
      queues_(sockets_.size()),
      last_progress_(sockets_.size(), Clock::now()),
      ack_watch_(sockets_.size()),
      receive_lowat_(sockets_.size(), 1),
      scratch_(sockets_.size()),
      pending_(new std::atomic<uint32_t>[sockets_.size()]) {
  for (size_t i = 0; i < sockets_.size(); ++i) pending_[i].store(0, std::memory_order_relaxed);
}

StripeWorker::~StripeWorker() {
  stop_.store(true);
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status StripeWorker::start() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return error(Code::kSystemError, "eventfd: " + errno_text(errno));
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    return error(Code::kSystemError, std::string("cannot start a helper thread: ") + e.what());
  }
  return ok_status();
}

void StripeWorker::enqueue(const Stripe& stripe) {
  if (inline_) {  // the caller's thread is the only one touching the queues
    add_to_queue(stripe, Clock::now());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.push_back(stripe);
  }
  // The helper already has stripes for this socket: it is moving them or waiting on the socket,
  // and takes this one from the inbox when the socket moves. A wake-up would only cost it a pass.
  if (pending_[stripe.socket].fetch_add(1, std::memory_order_acq_rel) > 0) return;
  if (sleeping_.exchange(false)) {
    wakes_.fetch_add(1, std::memory_order_relaxed);
    wake();
  }
}

bool StripeWorker::quiesced() {
  if (inline_) {  // nothing runs behind the caller's back
    for (auto& q : queues_) q.clear();
    return true;
  }
  if (quiesced_.load(std::memory_order_acquire)) return true;
  wake();
  return false;
}

void StripeWorker::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN means the counter is already non-zero: the worker wakes anyway
}

void StripeWorker::fail(const Status& status) {
  failure_->set(status);
  for (auto& q : queues_) q.clear();
}

void StripeWorker::drain_inbox() {
  std::vector<Stripe> incoming;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    incoming.swap(inbox_);
  }
  Clock::time_point now = incoming.empty() ? Clock::time_point() : Clock::now();
  for (const Stripe& s : incoming) add_to_queue(s, now);
}

void StripeWorker::add_to_queue(const Stripe& s, Clock::time_point now) {
  if (queues_[s.socket].empty()) last_progress_[s.socket] = now;
  queues_[s.socket].push_back(s);
}

void StripeWorker::progress(size_t budget_bytes) {
  if (failure_->failed()) {
    for (auto& q : queues_) q.clear();
    return;
  }
  bool progressed = false;
  for (size_t i = 0; i < sockets_.size() && budget_bytes > 0; ++i) {
    if (!queues_[i].empty() && !pump(i, &progressed, &budget_bytes)) return;
  }
  if (progressed) return;
  // Idle: look for hang-ups, vanished hosts and silent peers now and then (a poll per idle test()
  // would be a system call per spin of NCCL's proxy thread).
  const Clock::time_point now = Clock::now();
  if (now - last_inline_check_ < std::chrono::milliseconds(10)) return;
  last_inline_check_ = now;
  poll_sockets(0, false);
}

bool StripeWorker::prepare(size_t socket, Stripe& s) {
  s.prepared = true;
  if (!s.codec) return true;
  if (direction_ == Direction::kReceive) {
    s.prepared = false;  // the codec header tells the rest
    return true;
  }
  if (worth_encoding(codec_, s.data, s.length)) {
    const size_t bound = compress::encode_bound(s.length);
    uint8_t* frame = scratch_[socket].get(bound);
    const size_t n = compress::encode(s.data, s.length, frame, bound);
    if (n == 0) {
      fail(
          error(Code::kInternalError, "codec refused a stripe of " + std::to_string(s.length) + " bytes for " + peer_));
      return false;
    }
    s.in_scratch = true;
    s.codec_header_length = 0;
    s.body = reinterpret_cast<const char*>(frame);
    s.body_length = n;
  } else {
    write_raw_codec_header(s.length, s.codec_header);
    s.codec_header_length = kCodecHeaderBytes;
    s.body = s.data;
    s.body_length = s.length;
  }
  return true;
}

bool StripeWorker::accept_codec_header(size_t socket, Stripe& s) {
  size_t body = 0;
  bool zero_elided = false;
  Status st = check_codec_header(s.codec_header, s.length, peer_, &body, &zero_elided);
  if (!st.ok()) {
    fail(st);
    return false;
  }
  s.prepared = true;
  s.body_length = body;
  if (zero_elided) {
    // The frame is decoded as a whole once it is in: header first, the rest read behind it.
    uint8_t* frame = scratch_[socket].get(kCodecHeaderBytes + body);
    std::memcpy(frame, s.codec_header, kCodecHeaderBytes);
    s.in_scratch = true;
    s.body = reinterpret_cast<const char*>(frame + kCodecHeaderBytes);
  } else {
    s.body = s.data;
  }
  return true;
}

bool StripeWorker::complete(size_t socket, Stripe& s) {
  if (s.codec) {
    if (direction_ == Direction::kReceive && s.in_scratch) {
      Status st = decode_stripe(scratch_[socket].get(0), kCodecHeaderBytes + s.body_length, s.data, s.length, peer_);
      if (!st.ok()) {
        fail(st);
        return false;
      }
    }
    s.wire_bytes->fetch_add(s.codec_header_length + s.body_length, std::memory_order_relaxed);
  }
  s.stripes_left->fetch_sub(1, std::memory_order_acq_rel);
  queues_[socket].pop_front();
  if (!inline_) pending_[socket].fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

bool StripeWorker::pump(size_t socket, bool* progressed, size_t* budget) {
  auto& queue = queues_[socket];
  const int fd = sockets_[socket];
  while (!queue.empty() && *budget > 0) {
    Stripe& s = queue.front();
    if (s.moved == 0 && !s.prepared && !prepare(socket, s)) return false;
    iovec iov[kMaxBatchIov];
    size_t spans[kMaxBatchIov];  // bytes of iov that belong to each stripe of the batch, in queue order
    int count = remaining_iov(s, iov);
    size_t stripes = 1;
    spans[0] = iov_bytes(iov, count);
    // Plain stripes behind a plain front stripe join it (a codec stripe's frame is chosen, or
    // learned from its header, one at a time). A receiver reads their headers in the same call as
    // the payloads before them and checks each as it becomes whole; what lands early lands only
    // where that stripe's bytes belong.
    for (size_t k = 1; !s.codec && k < queue.size() && count + 2 <= kMaxBatchIov; ++k) {
      Stripe& next = queue[k];
      if (next.codec || next.moved != 0) break;
      next.prepared = true;  // a plain stripe has nothing to prepare
      const int added = remaining_iov(next, iov + count);
      spans[stripes++] = iov_bytes(iov + count, added);
      count += added;
    }
    if (iov_bytes(iov, count) > *budget) truncate_iov(iov, &count, *budget);
    if (direction_ == Direction::kSend && rate_limiter_) {
      const size_t want = iov_bytes(iov, count);
      // Inline, the caller's thread never sleeps: no tokens means come back on the next call.
      const size_t granted =
          rate_limiter_->acquire(want, kMinPacedWrite, inline_ ? std::chrono::milliseconds(0) : kMaxPaceWait);
      if (granted == 0) return true;  // (helper thread: slept; the loop comes back)
      truncate_iov(iov, &count, granted);
    }
    const size_t offered = iov_bytes(iov, count);
    IoResult r = direction_ == Direction::kSend ? write_some(fd, iov, count) : read_some(fd, iov, count);
    transfers_.fetch_add(1, std::memory_order_relaxed);
    if (direction_ == Direction::kSend && rate_limiter_) rate_limiter_->refund(offered - r.bytes);
    if (r.would_block) return true;
    if (r.closed) {
      fail(error(Code::kRemoteError, "peer " + peer_ + " closed the connection in the middle of a message"));
      return false;
    }
    if (r.error) {
      fail(error(Code::kRemoteError, std::string(direction_ == Direction::kSend ? "sending to " : "receiving from ") +
                                         peer_ + ": " + errno_text(r.error)));
      return false;
    }
    *budget -= std::min(*budget, r.bytes);
    *progressed = true;
    if (direction_ == Direction::kSend && r.bytes > 0) ack_watch_[socket].wrote();
    if (direction_ == Direction::kReceive) last_progress_[socket] = Clock::now();
    size_t left = r.bytes;
    for (size_t k = 0; k < stripes && left > 0; ++k) {
      const size_t bytes = std::min(left, spans[k]);
      if (!advance(socket, bytes)) return false;
      left -= bytes;
    }
    // A short transfer means the socket buffer is full (send) or drained (receive): go back to
    // poll rather than spend a system call on the EAGAIN that would follow.
    if (r.bytes < offered) return true;
  }
  return true;
}

bool StripeWorker::advance(size_t socket, size_t bytes) {
  Stripe& s = queues_[socket].front();
  const bool header_now_complete = s.moved < wire::kChunkHeaderBytes && s.moved + bytes >= wire::kChunkHeaderBytes;
  s.moved += bytes;
  if (direction_ == Direction::kReceive) {
    if (header_now_complete) {
      Status st = wire::check_chunk(s.header, s.expected);
      if (!st.ok()) {
        fail(error(Code::kRemoteError, "corrupt stream from " + peer_ + ": " + st.message()));
        return false;
      }
    }
    if (s.codec && !s.prepared && s.moved == wire::kChunkHeaderBytes + kCodecHeaderBytes &&
        !accept_codec_header(socket, s))
      return false;
  }
  if (s.prepared && s.moved == stripe_total(s) && !complete(socket, s)) return false;
  return true;
}

void StripeWorker::set_receive_lowat(size_t socket) {
  // What is certain to arrive: the rest of every queued stripe, as far as known (a codec frame's
  // body is known once its header is in).
  size_t remaining = 0;
  for (const Stripe& s : queues_[socket]) {
    remaining += stripe_total(s) - s.moved;
    if (remaining >= kReceiveBatch) break;
  }
  const int want = static_cast<int>(std::max<size_t>(1, std::min(kReceiveBatch, remaining)));
  if (want == receive_lowat_[socket]) return;
  if (::setsockopt(sockets_[socket], SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) receive_lowat_[socket] = want;
}

void StripeWorker::wait_for_work() {
  sleeping_.store(true);
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    if (!inbox_.empty() || stop_.load()) {
      sleeping_.store(false);
      return;
    }
  }
  poll_sockets(-1, true);
  sleeping_.store(false);
}

void StripeWorker::poll_sockets(int timeout_ms, bool compute_timeout) {
  const bool failed = failure_->failed();
  std::vector<pollfd> fds;
  std::vector<int> socket_of;  // index in sockets_, or -1 for the wake/watch descriptors
  collect_poll_fds(failed, compute_timeout, &fds, &socket_of, &timeout_ms);
  waiting_.store(true, std::memory_order_release);
  int n = ::poll(fds.data(), fds.size(), timeout_ms);
  waiting_.store(false, std::memory_order_release);
  if (n < 0) return;  // EINTR: the loop comes back here
  if (wake_fd_ >= 0 && (fds[0].revents & POLLIN)) {
    uint64_t count;
    ssize_t r = ::read(wake_fd_, &count, sizeof(count));
    (void)r;
  }
  if (failed) return;
  check_peers(fds, socket_of);
}

void StripeWorker::collect_poll_fds(bool failed, bool compute_timeout, std::vector<pollfd>* out,
                                    std::vector<int>* socket_of_out, int* timeout_out) {
  std::vector<pollfd>& fds = *out;
  std::vector<int>& socket_of = *socket_of_out;
  int& timeout_ms = *timeout_out;
  if (wake_fd_ >= 0) {
    fds.push_back({wake_fd_, POLLIN, 0});
    socket_of.push_back(-1);
  }
  if (!failed && watch_fd_ >= 0) {
    fds.push_back({watch_fd_, POLLIN | POLLRDHUP, 0});
    socket_of.push_back(-1);
    // The control socket carries small messages whole: written, they may wait unacknowledged.
    if (compute_timeout && unacknowledged_bytes(watch_fd_) > 0) {
      const int every =
          std::min(std::clamp(peer_timeout_ms_ / 4, 10, 1000), watch_acks_.remaining_ms(peer_timeout_ms_) + 1);
      timeout_ms = timeout_ms < 0 ? every : std::min(timeout_ms, every);
    }
  }
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; !failed && i < sockets_.size(); ++i) {
    short events = 0;
    if (!queues_[i].empty()) {
      events = direction_ == Direction::kSend ? POLLOUT : POLLIN;
      if (!compute_timeout) {
        // inline: a non-blocking look, no SO_RCVLOWAT games
      } else if (direction_ == Direction::kReceive) {
        set_receive_lowat(i);
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_[i]).count();
        int left = static_cast<int>(std::max<int64_t>(0, peer_timeout_ms_ - waited)) + 1;
        timeout_ms = timeout_ms < 0 ? left : std::min(timeout_ms, left);
      } else {
        // A blocked send is checked for a vanished host every so often (AckWatch), and at the
        // moment it would be declared dead, so the bound is SIEVE_PEER_TIMEOUT_MS itself.
        const int every =
            std::min(std::clamp(peer_timeout_ms_ / 4, 10, 1000), ack_watch_[i].remaining_ms(peer_timeout_ms_) + 1);
        timeout_ms = timeout_ms < 0 ? every : std::min(timeout_ms, every);
      }
    } else if (direction_ == Direction::kSend) {
      events = POLLIN | POLLRDHUP;  // a receiver never writes: readable means it hung up
      // Written but unacknowledged (the sends completed into the kernel's buffer): a vanished host
      // must still be noticed, so keep checking until the peer has acknowledged everything.
      if (compute_timeout && unacknowledged_bytes(sockets_[i]) > 0) {
        const int every =
            std::min(std::clamp(peer_timeout_ms_ / 4, 10, 1000), ack_watch_[i].remaining_ms(peer_timeout_ms_) + 1);
        timeout_ms = timeout_ms < 0 ? every : std::min(timeout_ms, every);
      }
    } else {
      continue;
    }
    fds.push_back({sockets_[i], events, 0});
    socket_of.push_back(static_cast<int>(i));
  }
}

void StripeWorker::check_peers(const std::vector<pollfd>& fds, const std::vector<int>& socket_of) {
  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].fd == wake_fd_) continue;
    bool idle = socket_of[k] < 0 || queues_[socket_of[k]].empty();
    if (direction_ == Direction::kSend && idle && (fds[k].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
      fail(error(Code::kRemoteError, "peer " + peer_ + " closed the connection"));
      return;
    }
  }
  if (direction_ == Direction::kSend && watch_fd_ >= 0) {
    Status st = watch_acks_.check(watch_fd_, peer_timeout_ms_, peer_);
    if (!st.ok()) {
      fail(st);
      return;
    }
  }
  if (direction_ == Direction::kSend) {
    for (size_t k = 0; k < fds.size(); ++k) {
      const int i = socket_of[k];
      if (i < 0 || (!queues_[i].empty() && (fds[k].revents & POLLOUT))) continue;
      // Idle sockets too: check() passes unless written data waits unacknowledged.
      Status st = ack_watch_[i].check(sockets_[i], peer_timeout_ms_, peer_);
      if (!st.ok()) {
        fail(st);
        return;
      }
    }
  }
  if (direction_ == Direction::kReceive) {
    const Clock::time_point later = Clock::now();
    for (size_t k = 0; k < fds.size(); ++k) {
      const int i = socket_of[k];
      if (i < 0 || queues_[i].empty()) continue;
      // Data waiting to be read is progress this thread has not made yet (it may have been starved
      // of CPU itself), not a silent peer.
      if (fds[k].revents & POLLIN) continue;
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(later - last_progress_[i]).count();
      if (waited >= peer_timeout_ms_) {
        fail(error(Code::kRemoteError, "peer " + peer_ + " sent nothing for " + std::to_string(waited) +
                                           " ms in the middle of a message (SIEVE_PEER_TIMEOUT_MS)"));
        return;
      }
    }
  }
}

void StripeWorker::run() {
  while (!stop_.load()) {
    drain_inbox();
    if (failure_->failed()) {
      for (auto& q : queues_) q.clear();
      quiesced_.store(true, std::memory_order_release);
    } else {
      bool progressed = false;
      size_t unlimited = SIZE_MAX;
      for (size_t i = 0; i < sockets_.size(); ++i) {
        if (!queues_[i].empty() && !pump(i, &progressed, &unlimited)) break;
      }
    }
    wait_for_work();
  }
}

}  // namespace sieve::net
