// SPDX-License-Identifier: Apache-2.0
// Moves stripes of large messages over a few data sockets of one connection, straight from the
// sender's buffer and straight into the posted receive buffer. Either on its own helper thread,
// which sleeps in poll() when idle (no spinning: CPU is scarce next to the training job) and is woken
// by an eventfd only when the caller queues a socket's first pending stripe while it sleeps (with
// stripes pending it waits on that socket anyway); or inline, on the caller's thread, a bounded
// number of bytes per progress() call, never waiting. Either way, plain stripes queued on a socket
// move together, one sendmsg/readv for several, and a receiving helper sleeps until a batch of them
// has arrived (SO_RCVLOWAT over what its queued stripes still need): system calls and wake-ups are
// what the transport's CPU goes to besides the kernel's own copying.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/connection.h"
#include "net/tcp/stripe_codec.h"
#include "net/wire.h"

namespace sieve::net {

struct Stripe {
  int socket = 0;  // index into the worker's sockets
  uint8_t header[wire::kChunkHeaderBytes];
  wire::ChunkHeader expected{};  // receiver: what the header must say
  char* data = nullptr;
  size_t length = 0;
  size_t moved = 0;                               // bytes of headers + payload transferred so far
  std::atomic<uint32_t>* stripes_left = nullptr;  // the request's counter, decremented when done
  // Codec stripes (message flagged wire::kFlagCodec): the chunk header is followed by one codec
  // frame. Either a raw frame (codec_header, then the user's bytes in place) or a zero-elided frame
  // built in (send) or read into (receive) the helper's scratch buffer.
  bool codec = false;
  bool prepared = false;    // send: frame chosen; receive: codec header checked
  bool in_scratch = false;  // zero-elided: the frame lives in the socket's scratch buffer
  uint8_t codec_header[kCodecHeaderBytes];
  size_t codec_header_length = 0;  // codec_header's bytes on the wire (0: the frame is all in body)
  const char* body = nullptr;      // what follows the headers on the wire
  size_t body_length = 0;
  std::atomic<uint64_t>* wire_bytes = nullptr;  // codec stripes add their frame's size here when done
};

class StripeWorker {
 public:
  enum class Direction { kSend, kReceive };

  // `sockets` are borrowed file descriptors (the comm owns them). `watch_fd` (or -1) is watched
  // for hang-up only: the control socket of a send comm, so a dead receiver is noticed.
  // `codec` decides which send stripes are zero-elided; `rate_limiter` (or null) paces sends.
  StripeWorker(Direction direction, std::vector<int> sockets, int watch_fd, Failure* failure, std::string peer,
               int peer_timeout_ms, TransportOptions::Codec codec = TransportOptions::Codec::kOff,
               RateLimiter* rate_limiter = nullptr);
  ~StripeWorker();
  StripeWorker(const StripeWorker&) = delete;
  StripeWorker& operator=(const StripeWorker&) = delete;

  Status start();
  // Inline mode instead of start(): no thread; the owner calls progress() from its own thread.
  void start_inline() { inline_ = true; }
  // Inline mode: moves at most budget_bytes, never blocks; checks the sockets' health when idle.
  void progress(size_t budget_bytes);
  // The helper thread, for placement next to its NIC (valid after start()).
  std::thread& thread() { return thread_; }
  void enqueue(const Stripe& stripe);
  // True once the worker has seen the comm's failure and dropped every stripe: from then on it
  // touches no user buffer, so a failed request may be handed back. Wakes the worker otherwise.
  bool quiesced();

  // What the worker has done so far, for tests and diagnostics (readable from any thread).
  struct Counters {
    uint64_t transfers = 0;  // sendmsg/readv calls on the data sockets
    uint64_t wakes = 0;      // helper woken through the eventfd by enqueue
  };
  Counters counters() const {
    return {transfers_.load(std::memory_order_relaxed), wakes_.load(std::memory_order_relaxed)};
  }
  // Helper thread: true while it waits in poll() (for work, or for its sockets to move).
  bool waiting() const { return waiting_.load(std::memory_order_acquire); }

 private:
  void run();
  void drain_inbox();
  // Moves bytes on one socket until it would block or *budget is spent; false when the comm failed.
  // Plain stripes queued one behind the other move together, one sendmsg/readv for several.
  bool pump(size_t socket, bool* progressed, size_t* budget);
  // `bytes` more of the socket's front stripe moved: checks what became whole; false when the comm failed.
  bool advance(size_t socket, size_t bytes);
  // Chooses (send) the front stripe's frame; false when the comm failed.
  bool prepare(size_t socket, Stripe& s);
  // The receiver learned the codec header: where the rest of the frame goes.
  bool accept_codec_header(size_t socket, Stripe& s);
  // Last bytes of a stripe moved: decode it if needed, count it, release it.
  bool complete(size_t socket, Stripe& s);
  void wait_for_work();
  // Polls the sockets (timeout_ms: -1 until something happens) and fails the comm on a hang-up, a
  // vanished host or a peer silent mid-message.
  void poll_sockets(int timeout_ms, bool compute_timeout);
  // What poll_sockets waits on: the wake and watch descriptors, the sockets with work, and (sending)
  // idle sockets whose hang-up or unacknowledged data must still be noticed; socket_of maps each to
  // its index in sockets_ (-1: none). Lowers *timeout_ms to the next liveness check.
  void collect_poll_fds(bool failed, bool compute_timeout, std::vector<pollfd>* fds, std::vector<int>* socket_of,
                        int* timeout_ms);
  // After a poll: fails the comm on a hang-up, a vanished host or a peer silent mid-message.
  void check_peers(const std::vector<pollfd>& fds, const std::vector<int>& socket_of);
  void add_to_queue(const Stripe& s, Clock::time_point now);
  // Lets poll wake the receiver only once a worthwhile batch has arrived (never more than the
  // current stripe still needs, or it would wait for bytes the sender has no reason to send).
  void set_receive_lowat(size_t socket);
  void fail(const Status& status);
  void wake();

  const Direction direction_;
  const std::vector<int> sockets_;
  const int watch_fd_;
  Failure* const failure_;
  const std::string peer_;
  const int peer_timeout_ms_;
  const TransportOptions::Codec codec_;
  RateLimiter* const rate_limiter_;

  int wake_fd_ = -1;
  std::mutex inbox_mutex_;
  std::vector<Stripe> inbox_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> quiesced_{false};
  std::atomic<bool> waiting_{false};
  std::atomic<uint64_t> transfers_{0};
  std::atomic<uint64_t> wakes_{0};
  bool inline_ = false;
  Clock::time_point last_inline_check_{};
  std::vector<std::deque<Stripe>> queues_;  // per socket, touched by the worker thread only
  std::vector<Clock::time_point> last_progress_;
  std::vector<AckWatch> ack_watch_;     // send direction: is a blocked socket's host still there?
  AckWatch watch_acks_;                 // the same for the control socket (watch_fd_), read-only here
  std::vector<int> receive_lowat_;      // SO_RCVLOWAT in force per socket (receive direction)
  std::vector<ScratchBuffer> scratch_;  // per socket: the front stripe's encoded frame
  // Per socket: stripes enqueued and not yet done (inbox and queue). A helper with stripes for a
  // socket waits on that socket, so only a socket's first stripe needs to wake it.
  std::unique_ptr<std::atomic<uint32_t>[]> pending_;
  std::thread thread_;
};

}  // namespace sieve::net
