// SPDX-License-Identifier: Apache-2.0
// The TCP send and receive comms: framing on the control socket (driven by the caller's thread, so
// small messages cost no thread hand-off) and stripes on the data sockets (driven by helper
// threads, or inline by the caller's thread too).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "net/connection.h"
#include "net/tcp/stripe_worker.h"
#include "net/transport.h"
#include "net/wire.h"

namespace sieve::net {

class TcpComm;

// One outstanding isend or irecv. Slots are reused once test has reported them done.
struct Slot final : Request {
  Status test(Completion* out) override;
  void* comm_tag() const override;

  TcpComm* owner = nullptr;
  bool busy = false;
  char* data = nullptr;
  size_t capacity = 0;  // receive: posted size
  size_t size = 0;      // bytes really carried (known on receive once the frame header arrived)
  uint64_t sequence = 0;
  bool inline_payload = false;
  uint8_t header[wire::kFrameHeaderBytes];
  size_t control_moved = 0;   // send: header + inline payload bytes written
  bool control_done = false;  // frame header (and inline payload) fully moved
  std::atomic<uint32_t> stripes_left{0};
  uint64_t wire_bytes = 0;  // headers, plus the payload unless its stripes are codec frames
  bool codec = false;       // stripes are codec frames: their helpers add each frame's size below
  std::atomic<uint64_t> codec_wire_bytes{0};
};

// What send and receive comms share: the connection, the first failure, the helper threads, the slots.
class TcpComm {
 public:
  TcpComm(Connection connection, const CommOptions& options);
  virtual ~TcpComm();
  TcpComm(const TcpComm&) = delete;
  TcpComm& operator=(const TcpComm&) = delete;

  Status start(StripeWorker::Direction direction);
  // Moves the control socket and (inline) the data sockets, then reports the slot: done, failed
  // (once no helper can touch its buffer), or not yet.
  Status test(Slot* slot, Completion* out);
  void* tag() const { return tag_; }

 protected:
  Slot* free_slot();
  Status fail(const Status& status);  // records (and logs) the first failure; returns the comm's failure
  // Splits [data, data+length) into stripes over the data sockets; returns how many.
  uint32_t queue_stripes(Slot* slot);
  // Messages sent from this side go as codec stripes (the peer understands them and codec is not off).
  bool send_codec() const;
  Status finish(Slot* slot, Completion* out);
  // A failed request is reported only once no helper thread can still touch its buffer; until
  // then test says "not done" (the helpers notice the failure within one poll wake-up).
  Status report_failure(Slot* slot);
  int nsocks() const { return static_cast<int>(connection_.data.size()); }
  // Inline progress: moves the data sockets' bytes on this (the caller's) thread, bounded per call
  // so one busy connection cannot starve the others NCCL's proxy thread serves.
  void progress_inline();
  static constexpr size_t kInlineBudgetBytes = 4 << 20;
  // Frames on the control socket, on the caller's thread; a failure is recorded in failure_.
  virtual Status progress_control() = 0;

  Connection connection_;
  const CommOptions options_;
  Failure failure_;
  std::array<Slot, kMaxRequests> slots_;
  uint64_t next_sequence_ = 0;
  uint64_t stripe_cursor_ = 0;
  void* tag_ = nullptr;
  bool inline_ = false;  // the data sockets are moved by progress_inline, no helper threads
  std::vector<std::unique_ptr<StripeWorker>> workers_;  // last: stopped before the sockets close
};

class TcpSendComm final : public SendComm, public TcpComm {
 public:
  using TcpComm::TcpComm;
  Status isend(const void* data, size_t size, Request** request) override;
  const std::string& peer() const override { return connection_.peer; }
  void set_tag(void* tag) override { tag_ = tag; }

 private:
  Status progress_control() override;
  std::deque<Slot*> control_queue_;  // frames not yet fully written, in sequence order
  AckWatch control_acks_;            // a blocked control socket: is the peer's host still there?
};

class TcpRecvComm final : public RecvComm, public TcpComm {
 public:
  using TcpComm::TcpComm;
  Status irecv(void* data, size_t capacity, Request** request) override;
  const std::string& peer() const override { return connection_.peer; }
  void set_tag(void* tag) override { tag_ = tag; }

 private:
  Status progress_control() override;
  Status read_header(bool* complete);
  std::deque<Slot*> awaiting_header_;  // posted receives whose frame header has not arrived
  Slot* reading_inline_ = nullptr;     // the receive whose inline payload is arriving
  uint8_t header_[wire::kFrameHeaderBytes];
  size_t header_moved_ = 0;
  Clock::time_point last_control_progress_{};
};

}  // namespace sieve::net
