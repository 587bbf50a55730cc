// SPDX-License-Identifier: Apache-2.0
#include "net/tcp/comm.h"

#include "net/log.h"
#include "net/tcp/stripe_codec.h"
#include "topology/pinning.h"

namespace sieve::net {

Status Slot::test(Completion* out) { return owner->test(this, out); }
void* Slot::comm_tag() const { return owner->tag(); }

TcpComm::TcpComm(Connection connection, const CommOptions& options)
    : connection_(std::move(connection)), options_(options) {
  for (auto& s : slots_) s.owner = this;
}

TcpComm::~TcpComm() { workers_.clear(); }

Status TcpComm::start(StripeWorker::Direction direction) {
  TransportOptions shape;
  shape.nthreads = options_.nthreads;
  shape.progress = options_.progress;
  if (inline_progress(shape, nsocks())) {
    // One inline worker over every data socket, driven from isend/irecv/test (progress_inline).
    std::vector<int> fds;
    for (auto& fd : connection_.data) fds.push_back(fd.get());
    int watch = direction == StripeWorker::Direction::kSend ? connection_.control.get() : -1;
    workers_.push_back(std::make_unique<StripeWorker>(direction, std::move(fds), watch, &failure_, connection_.peer,
                                                      options_.peer_timeout_ms, options_.codec,
                                                      options_.rate_limiter.get()));
    workers_.back()->start_inline();
    inline_ = true;
    return ok_status();
  }
  const int wanted = options_.nthreads > 0 ? options_.nthreads : auto_nthreads(nsocks());
  const int nthreads = std::max(1, std::min(wanted, nsocks()));
  for (int w = 0; w < nthreads; ++w) {
    std::vector<int> fds;
    for (int s = w; s < nsocks(); s += nthreads) fds.push_back(connection_.data[s].get());
    int watch = direction == StripeWorker::Direction::kSend && w == 0 ? connection_.control.get() : -1;
    workers_.push_back(std::make_unique<StripeWorker>(direction, std::move(fds), watch, &failure_, connection_.peer,
                                                      options_.peer_timeout_ms, options_.codec,
                                                      options_.rate_limiter.get()));
    Status st = workers_.back()->start();
    if (!st.ok()) return st;
    if (!options_.helper_cpus.empty()) {
      // Placement is an optimisation: a refusal (a cgroup without those CPUs) leaves the thread floating.
      std::string refused = topology::pin_thread_to(workers_.back()->thread().native_handle(), options_.helper_cpus);
      if (!refused.empty())
        SIEVE_WARN("helper thread for %s not pinned: %s", connection_.peer.c_str(), refused.c_str());
    }
  }
  return ok_status();
}

void TcpComm::progress_inline() {
  if (inline_) workers_.front()->progress(kInlineBudgetBytes);
}

Slot* TcpComm::free_slot() {
  for (auto& s : slots_) {
    if (!s.busy) {
      s.busy = true;
      s.data = nullptr;
      s.capacity = s.size = 0;
      s.inline_payload = false;
      s.control_moved = 0;
      s.control_done = false;
      s.stripes_left.store(0, std::memory_order_relaxed);
      s.wire_bytes = 0;
      s.codec = false;
      s.codec_wire_bytes.store(0, std::memory_order_relaxed);
      return &s;
    }
  }
  return nullptr;
}

Status TcpComm::fail(const Status& status) {
  failure_.set(status);
  return failure_.surface();
}

bool TcpComm::send_codec() const {
  return (connection_.caps & wire::kCapZeroElide) && options_.codec != TransportOptions::Codec::kOff;
}

uint32_t TcpComm::queue_stripes(Slot* slot) {
  char* const data = slot->data;
  const uint64_t length = slot->size;
  const uint64_t sequence = slot->sequence;
  std::atomic<uint32_t>* const stripes_left = &slot->stripes_left;
  wire::StripePlan plan = wire::plan_stripes(length, nsocks(), connection_.chunk_size);
  stripes_left->store(static_cast<uint32_t>(plan.count), std::memory_order_relaxed);
  const int nthreads = static_cast<int>(workers_.size());
  for (size_t j = 0; j < plan.count; ++j) {
    int socket = static_cast<int>((stripe_cursor_ + j) % nsocks());
    Stripe s;
    s.socket = socket / nthreads;
    s.expected.offset = j * plan.chunk;
    s.expected.length = static_cast<uint32_t>(std::min<uint64_t>(plan.chunk, length - s.expected.offset));
    s.expected.sequence = sequence;
    wire::encode_chunk(s.expected, s.header);
    s.data = data + s.expected.offset;
    s.length = s.expected.length;
    s.stripes_left = stripes_left;
    if (slot->codec) {
      s.codec = true;
      s.codec_header_length = kCodecHeaderBytes;
      s.wire_bytes = &slot->codec_wire_bytes;
    }
    workers_[socket % nthreads]->enqueue(s);
  }
  stripe_cursor_ += plan.count;
  return static_cast<uint32_t>(plan.count);
}

Status TcpComm::finish(Slot* slot, Completion* out) {
  out->done = true;
  out->size = slot->size;
  out->wire_bytes = slot->wire_bytes + slot->codec_wire_bytes.load(std::memory_order_acquire);
  out->sent = dynamic_cast<TcpSendComm*>(this) != nullptr;
  slot->busy = false;
  return ok_status();
}

Status TcpComm::report_failure(Slot* slot) {
  for (auto& w : workers_)
    if (!w->quiesced()) return ok_status();
  slot->busy = false;
  return failure_.surface();
}

Status TcpComm::test(Slot* slot, Completion* out) {
  *out = Completion{};
  if (!slot->busy) return error(Code::kInvalidUsage, "test on a request that is not outstanding");
  static_cast<void>(progress_control());  // a failure is also recorded in failure_, reported below
  progress_inline();
  if (slot->control_done && slot->stripes_left.load(std::memory_order_acquire) == 0) return finish(slot, out);
  if (failure_.failed()) return report_failure(slot);
  return ok_status();
}

namespace {
// What is known before the stripes move: codec stripes add their frames' sizes as they complete.
uint64_t wire_bytes_of(uint64_t size, bool inline_payload, bool codec, uint32_t stripes) {
  return wire::kFrameHeaderBytes + (codec ? 0 : size) +
         (inline_payload ? 0 : uint64_t(stripes) * wire::kChunkHeaderBytes);
}
}  // namespace

// ---------------------------------------------------------------- send

Status TcpSendComm::isend(const void* data, size_t size, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (size > 0 && !data)
    return error(Code::kInvalidArgument, "isend of " + std::to_string(size) + " bytes from a null buffer");
  Slot* slot = free_slot();
  if (!slot) return ok_status();  // kMaxRequests outstanding: NCCL retries
  slot->data = static_cast<char*>(const_cast<void*>(data));
  slot->size = size;
  slot->sequence = next_sequence_++;
  slot->inline_payload = size <= options_.inline_threshold;
  // Small inline messages stay raw; so does a message whose sample says eliding would not pay.
  slot->codec = !slot->inline_payload && send_codec() && worth_encoding(options_.codec, data, size);
  const uint32_t flags = slot->inline_payload ? wire::kFlagInline : slot->codec ? wire::kFlagCodec : 0u;
  wire::encode_frame({flags, slot->sequence, size}, slot->header);
  uint32_t stripes = slot->inline_payload ? 0 : queue_stripes(slot);
  slot->wire_bytes = wire_bytes_of(size, slot->inline_payload, slot->codec, stripes);
  control_queue_.push_back(slot);
  *request = slot;
  Status st = progress_control();
  progress_inline();
  return st.ok() ? ok_status() : st;
}

Status TcpSendComm::progress_control() {
  const int fd = connection_.control.get();
  while (!control_queue_.empty() && !failure_.failed()) {
    Slot* s = control_queue_.front();
    const size_t total = wire::kFrameHeaderBytes + (s->inline_payload ? s->size : 0);
    iovec iov[2];
    int count = 0;
    if (s->control_moved < wire::kFrameHeaderBytes) {
      iov[count++] = {s->header + s->control_moved, wire::kFrameHeaderBytes - s->control_moved};
      if (s->inline_payload && s->size) iov[count++] = {s->data, s->size};
    } else {
      iov[count++] = {s->data + (s->control_moved - wire::kFrameHeaderBytes), total - s->control_moved};
    }
    IoResult r = write_some(fd, iov, count);
    if (r.would_block) {
      Status alive = control_acks_.check(fd, options_.peer_timeout_ms, connection_.peer);
      return alive.ok() ? ok_status() : fail(alive);
    }
    if (r.error) return fail(error(Code::kRemoteError, "sending to " + connection_.peer + ": " + errno_text(r.error)));
    control_acks_.wrote();
    s->control_moved += r.bytes;
    if (options_.rate_limiter) options_.rate_limiter->charge(r.bytes);  // paid for by the helpers' next stripes
    if (s->control_moved == total) {
      s->control_done = true;
      control_queue_.pop_front();
    }
  }
  return ok_status();
}

// ---------------------------------------------------------------- receive

Status TcpRecvComm::irecv(void* data, size_t capacity, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (capacity > 0 && !data) return error(Code::kInvalidArgument, "irecv into a null buffer");
  Slot* slot = free_slot();
  if (!slot) return ok_status();
  slot->data = static_cast<char*>(data);
  slot->capacity = capacity;
  slot->sequence = next_sequence_++;
  if (awaiting_header_.empty() && !reading_inline_) last_control_progress_ = Clock::now();
  awaiting_header_.push_back(slot);
  *request = slot;
  Status st = progress_control();
  progress_inline();
  return st.ok() ? ok_status() : st;
}

Status TcpRecvComm::read_header(bool* complete) {
  *complete = false;
  iovec v{header_ + header_moved_, sizeof(header_) - header_moved_};
  IoResult r = read_some(connection_.control.get(), &v, 1);
  if (r.would_block) return ok_status();
  if (r.closed) return fail(error(Code::kRemoteError, "peer " + connection_.peer + " closed the connection"));
  if (r.error)
    return fail(error(Code::kRemoteError, "receiving from " + connection_.peer + ": " + errno_text(r.error)));
  header_moved_ += r.bytes;
  last_control_progress_ = Clock::now();
  *complete = header_moved_ == sizeof(header_);
  return ok_status();
}

Status TcpRecvComm::progress_control() {
  const uint32_t allowed = wire::kFlagInline | ((connection_.caps & wire::kCapZeroElide) ? wire::kFlagCodec : 0u);
  while (!failure_.failed()) {
    if (Slot* s = reading_inline_) {
      iovec v{s->data + s->control_moved, s->size - s->control_moved};
      IoResult r = read_some(connection_.control.get(), &v, 1);
      if (r.would_block) break;
      if (r.closed)
        return fail(error(Code::kRemoteError,
                          "peer " + connection_.peer + " closed the connection in the middle of a message"));
      if (r.error)
        return fail(error(Code::kRemoteError, "receiving from " + connection_.peer + ": " + errno_text(r.error)));
      s->control_moved += r.bytes;
      last_control_progress_ = Clock::now();
      if (s->control_moved == s->size) {
        s->control_done = true;
        reading_inline_ = nullptr;
      }
      continue;
    }
    if (awaiting_header_.empty()) return ok_status();
    bool complete = false;
    Status st = read_header(&complete);
    if (!st.ok()) return st;
    if (!complete) break;
    header_moved_ = 0;
    Slot* s = awaiting_header_.front();
    awaiting_header_.pop_front();
    wire::FrameHeader frame;
    st = wire::decode_frame(header_, s->sequence, allowed, &frame);
    if (!st.ok())
      return fail(error(Code::kRemoteError, "corrupt stream from " + connection_.peer + ": " + st.message()));
    if (frame.length > s->capacity)
      return fail(
          error(Code::kInvalidUsage, "peer " + connection_.peer + " sent a message of " + std::to_string(frame.length) +
                                         " bytes but the posted receive holds only " + std::to_string(s->capacity) +
                                         " (a send larger than its receive is not allowed)"));
    s->size = frame.length;
    s->inline_payload = frame.flags & wire::kFlagInline;
    s->codec = frame.flags & wire::kFlagCodec;
    if (s->inline_payload && s->codec)
      return fail(
          error(Code::kRemoteError, "corrupt stream from " + connection_.peer + ": an inline frame flagged as codec"));
    uint32_t stripes = 0;
    if (s->inline_payload) {
      if (s->size == 0) s->control_done = true;
      else reading_inline_ = s;
    } else {
      stripes = queue_stripes(s);
      s->control_done = true;
    }
    s->wire_bytes = wire_bytes_of(s->size, s->inline_payload, s->codec, stripes);
  }
  // A frame started but stalled: the sender is stuck mid-message (an idle sender is fine).
  if ((header_moved_ > 0 || reading_inline_) && !failure_.failed()) {
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_control_progress_).count();
    if (waited >= options_.peer_timeout_ms)
      return fail(error(Code::kRemoteError, "peer " + connection_.peer + " sent nothing for " + std::to_string(waited) +
                                                " ms in the middle of a message (SIEVE_PEER_TIMEOUT_MS)"));
  }
  return ok_status();
}

}  // namespace sieve::net
