#include "net/stripe_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "net/log.h"

namespace sieve::net {

namespace {
// Bytes a receiving helper waits for before it wakes: fewer wake-ups per GB (CPU is scarce next
// to the training job) while far below the socket buffer, so the sender never stalls on it.
constexpr size_t kReceiveBatch = 128 * 1024;

size_t iov_bytes(const iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
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
                           std::string peer, int peer_timeout_ms)
    : direction_(direction),
      sockets_(std::move(sockets)),
      watch_fd_(watch_fd),
      failure_(failure),
      peer_(std::move(peer)),
      peer_timeout_ms_(peer_timeout_ms),
      queues_(sockets_.size()),
      last_progress_(sockets_.size(), Clock::now()),
      receive_lowat_(sockets_.size(), 1) {}

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
  if (wake_fd_ < 0) return error(Code::SystemError, "eventfd: " + errno_text(errno));
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    return error(Code::SystemError, std::string("cannot start a helper thread: ") + e.what());
  }
  return Status::ok();
}

void StripeWorker::enqueue(const Stripe& stripe) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.push_back(stripe);
  }
  if (sleeping_.exchange(false)) wake();
}

bool StripeWorker::quiesced() {
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
  for (const Stripe& s : incoming) {
    if (queues_[s.socket].empty()) last_progress_[s.socket] = now;
    queues_[s.socket].push_back(s);
  }
}

bool StripeWorker::pump(size_t socket, bool* progressed) {
  auto& queue = queues_[socket];
  const int fd = sockets_[socket];
  while (!queue.empty()) {
    Stripe& s = queue.front();
    const size_t total = wire::kChunkHeaderBytes + s.length;
    iovec iov[2];
    int count = 0;
    if (s.moved < wire::kChunkHeaderBytes) {
      iov[count++] = {s.header + s.moved, wire::kChunkHeaderBytes - s.moved};
      if (s.length) iov[count++] = {s.data, s.length};
    } else {
      iov[count++] = {s.data + (s.moved - wire::kChunkHeaderBytes), total - s.moved};
    }
    IoResult r = direction_ == Direction::Send ? write_some(fd, iov, count) : read_some(fd, iov, count);
    if (r.would_block) return true;
    if (r.closed) {
      fail(error(Code::RemoteError, "peer " + peer_ + " closed the connection in the middle of a message"));
      return false;
    }
    if (r.error) {
      fail(error(Code::RemoteError, std::string(direction_ == Direction::Send ? "sending to " : "receiving from ") +
                                        peer_ + ": " + errno_text(r.error)));
      return false;
    }
    bool header_now_complete = s.moved < wire::kChunkHeaderBytes && s.moved + r.bytes >= wire::kChunkHeaderBytes;
    // A short transfer means the socket buffer is full (send) or drained (receive): go back to
    // poll rather than spend a system call on the EAGAIN that would follow.
    const bool short_transfer = r.bytes < iov_bytes(iov, count);
    s.moved += r.bytes;
    *progressed = true;
    if (direction_ == Direction::Receive) {
      last_progress_[socket] = Clock::now();
      if (header_now_complete) {
        Status st = wire::check_chunk(s.header, s.expected);
        if (!st.is_ok()) {
          fail(error(Code::RemoteError, "corrupt stream from " + peer_ + ": " + st.message()));
          return false;
        }
      }
    }
    if (s.moved == total) {
      s.stripes_left->fetch_sub(1, std::memory_order_acq_rel);
      queue.pop_front();
    }
    if (short_transfer) return true;
  }
  return true;
}

void StripeWorker::set_receive_lowat(size_t socket) {
  const Stripe& s = queues_[socket].front();
  const size_t remaining = wire::kChunkHeaderBytes + s.length - s.moved;
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
  const bool failed = failure_->failed();
  std::vector<pollfd> fds;
  std::vector<int> socket_of;  // index in sockets_, or -1 for the wake/watch descriptors
  fds.push_back({wake_fd_, POLLIN, 0});
  socket_of.push_back(-1);
  if (!failed && watch_fd_ >= 0) {
    fds.push_back({watch_fd_, POLLIN | POLLRDHUP, 0});
    socket_of.push_back(-1);
  }
  int timeout_ms = -1;
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; !failed && i < sockets_.size(); ++i) {
    short events = 0;
    if (!queues_[i].empty()) {
      events = direction_ == Direction::Send ? POLLOUT : POLLIN;
      if (direction_ == Direction::Receive) {
        set_receive_lowat(i);
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_[i]).count();
        int left = static_cast<int>(std::max<int64_t>(0, peer_timeout_ms_ - waited)) + 1;
        timeout_ms = timeout_ms < 0 ? left : std::min(timeout_ms, left);
      }
    } else if (direction_ == Direction::Send) {
      events = POLLIN | POLLRDHUP;  // a receiver never writes: readable means it hung up
    } else {
      continue;
    }
    fds.push_back({sockets_[i], events, 0});
    socket_of.push_back(static_cast<int>(i));
  }
  int n = ::poll(fds.data(), fds.size(), timeout_ms);
  sleeping_.store(false);
  if (n < 0) return;  // EINTR: the loop comes back here
  if (fds[0].revents & POLLIN) {
    uint64_t count;
    ssize_t r = ::read(wake_fd_, &count, sizeof(count));
    (void)r;
  }
  if (failed) return;
  for (size_t k = 1; k < fds.size(); ++k) {
    bool idle = socket_of[k] < 0 || queues_[socket_of[k]].empty();
    if (direction_ == Direction::Send && idle && (fds[k].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
      fail(error(Code::RemoteError, "peer " + peer_ + " closed the connection"));
      return;
    }
  }
  if (direction_ == Direction::Receive) {
    const Clock::time_point later = Clock::now();
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (queues_[i].empty()) continue;
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(later - last_progress_[i]).count();
      if (waited >= peer_timeout_ms_) {
        fail(error(Code::RemoteError, "peer " + peer_ + " sent nothing for " + std::to_string(waited) +
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
      for (size_t i = 0; i < sockets_.size(); ++i) {
        if (!queues_[i].empty() && !pump(i, &progressed)) break;
      }
    }
    wait_for_work();
  }
}

}  // namespace sieve::net
