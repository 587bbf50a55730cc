// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace sieve::fake_verbs {
namespace {

constexpr int kMaxIov = 32;

}  // namespace

Connection::~Connection() {
  if (fd >= 0) ::close(fd);
}

void Connection::queue_copy(const void* data, size_t length) {
  auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                     static_cast<const uint8_t*>(data) + length);
  out.push_back({copy, copy->data(), copy->size()});
}

void Connection::queue_message(const MsgHeader& message, const void* payload, size_t payload_length) {
  auto copy = std::make_shared<std::vector<uint8_t>>(sizeof(message) + payload_length);
  std::memcpy(copy->data(), &message, sizeof(message));
  if (payload_length > 0) std::memcpy(copy->data() + sizeof(message), payload, payload_length);
  out.push_back({copy, copy->data(), copy->size()});
}

void Connection::queue_reference(const uint8_t* data, size_t length,
                                 std::shared_ptr<const std::vector<uint8_t>> owner) {
  if (length > 0) out.push_back({std::move(owner), data, length});
}

IoResult Connection::flush(size_t budget) {
  bool progressed = false;
  while (!out.empty() && budget > 0) {
    iovec iov[kMaxIov];
    int count = 0;
    size_t offered = 0;
    for (auto it = out.begin(); it != out.end() && count < kMaxIov && offered < budget; ++it) {
      size_t take = std::min(it->length, budget - offered);
      iov[count++] = {const_cast<uint8_t*>(it->data), take};
      offered += take;
    }
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progressed ? IoResult::kProgress : IoResult::kWouldBlock;
      return IoResult::kClosed;
    }
    progressed = true;
    budget -= static_cast<size_t>(sent);
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      OutChunk& front = out.front();
      size_t take = std::min(left, front.length);
      front.data += take;
      front.length -= take;
      left -= take;
      if (front.length == 0) out.pop_front();
    }
  }
  return progressed ? IoResult::kProgress : IoResult::kWouldBlock;
}

IoResult Connection::read_header() {
  while (header_bytes < sizeof(header)) {
    ssize_t got =
        ::recv(fd, reinterpret_cast<uint8_t*>(&header) + header_bytes, sizeof(header) - header_bytes, MSG_DONTWAIT);
    if (got == 0) return IoResult::kClosed;
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
      return IoResult::kClosed;
    }
    header_bytes += static_cast<size_t>(got);
  }
  return IoResult::kProgress;
}

void Connection::expect_payload(uint64_t length, std::vector<Piece> destination) {
  payload_left = length;
  scatter = std::move(destination);
  scatter_index = 0;
  scatter_offset = 0;
}

IoResult Connection::read_payload(size_t budget) {
  static thread_local std::vector<uint8_t> discard(1 << 20);
  while (payload_left > 0) {
    if (budget == 0) return IoResult::kWouldBlock;
    iovec iov[kMaxIov];
    int count = 0;
    uint64_t offered = 0;
    size_t limit = static_cast<size_t>(std::min<uint64_t>(payload_left, budget));
    for (size_t i = scatter_index; i < scatter.size() && count < kMaxIov && offered < limit; ++i) {
      size_t start = i == scatter_index ? scatter_offset : 0;
      size_t take = std::min<uint64_t>(scatter[i].length - start, limit - offered);
      if (take == 0) continue;
      iov[count++] = {scatter[i].host + start, take};
      offered += take;
    }
    bool discarding = count == 0;
    if (discarding) iov[count++] = {discard.data(), std::min(discard.size(), limit)};
    ssize_t got = ::readv(fd, iov, count);
    if (got == 0) return IoResult::kClosed;
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
      return IoResult::kClosed;
    }
    payload_left -= static_cast<uint64_t>(got);
    budget -= static_cast<size_t>(got);
    if (discarding) continue;
    size_t left = static_cast<size_t>(got);
    while (left > 0 && scatter_index < scatter.size()) {
      size_t room = scatter[scatter_index].length - scatter_offset;
      size_t take = std::min(left, room);
      scatter_offset += take;
      left -= take;
      if (scatter_offset == scatter[scatter_index].length) {
        ++scatter_index;
        scatter_offset = 0;
      }
    }
  }
  return IoResult::kProgress;
}

void Connection::reset_input() {
  header_bytes = 0;
  header_taken = false;
  scatter.clear();
  scatter_index = 0;
  scatter_offset = 0;
  payload_left = 0;
  small.clear();
  rnr_since = {};
  has_recv = false;
  target_mr = nullptr;
  failure = IBV_WC_SUCCESS;
  failure_text.clear();
}

}  // namespace sieve::fake_verbs
