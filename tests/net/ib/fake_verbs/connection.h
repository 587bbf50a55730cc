// SPDX-License-Identifier: Apache-2.0
// One non-blocking unix stream between a requester QP and a responder device endpoint, with the
// output queue and the input parser state the service thread keeps for it. Nothing here blocks:
// a peer that stops reading only stops this connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "tests/net/ib/fake_verbs/objects.h"
#include "tests/net/ib/fake_verbs/wire.h"

namespace sieve::fake_verbs {

struct OutChunk {
  std::shared_ptr<const std::vector<uint8_t>> owner;  // keeps `data` alive when it is a copy
  const uint8_t* data = nullptr;
  size_t length = 0;
};

enum class IoResult { kProgress, kWouldBlock, kClosed };

struct Connection {
  enum class Role { kRequester, kResponder };

  ~Connection();

  Role role = Role::kRequester;
  int fd = -1;
  Device* device = nullptr;  // responder: the device whose port accepted it
  Port* port = nullptr;      // responder: that port
  Qp* qp = nullptr;          // requester: its owner; responder: the target, once Hello named it
  std::string endpoint;      // requester: the abstract socket it connects to
  bool connected = false;    // requester: connect() went through (it is retried while the backlog is full)
  bool closing = false;      // read no more; close when the output is flushed
  bool dead = false;         // the service thread removes it

  std::deque<OutChunk> out;

  // Input: a header, then its payload scattered over `scatter` (anything beyond it is discarded).
  MsgHeader header;
  size_t header_bytes = 0;
  bool header_taken = false;  // dispatched: the payload (if any) is being read
  std::vector<Piece> scatter;
  size_t scatter_index = 0;
  size_t scatter_offset = 0;
  uint64_t payload_left = 0;
  std::vector<uint8_t> small;  // Hello and NAK texts land here

  // Responder state.
  bool hello_checked = false;
  Hello hello;
  std::chrono::steady_clock::time_point rnr_since{};  // first "receiver not ready" for this message
  bool has_recv = false;                              // the receive this message consumes
  RecvWr recv;
  Mr* target_mr = nullptr;                 // pinned while a write lands in it
  ibv_wc_status failure = IBV_WC_SUCCESS;  // answer with a NAK once the payload is drained
  std::string failure_text;

  void queue_copy(const void* data, size_t length);
  void queue_message(const MsgHeader& header, const void* payload = nullptr, size_t payload_length = 0);
  void queue_reference(const uint8_t* data, size_t length, std::shared_ptr<const std::vector<uint8_t>> owner);

  // Writes queued output, at most `budget` bytes.
  IoResult flush(size_t budget);
  // Reads the rest of the header into `header`. kProgress once it is complete.
  IoResult read_header();
  // Reads payload into the scatter list (or discards it), at most `budget` bytes. kProgress once done.
  IoResult read_payload(size_t budget);
  void expect_payload(uint64_t length, std::vector<Piece> destination);
  void reset_input();
};

}  // namespace sieve::fake_verbs
