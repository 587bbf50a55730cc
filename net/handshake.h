// SPDX-License-Identifier: Apache-2.0
// Connection establishment as non-blocking state machines. NCCL calls connect and accept again and
// again; each call moves every socket of the connection as far as it can without waiting.
//
// Per socket: connector sends hello (listener nonce from the handle, connection id, socket index,
// caps, its nonce, a keyed hash of all that proving the job token); listener answers welcome (its
// caps, its nonce, a keyed hash proving the job token); connector answers proof (its own keyed hash
// over both nonces). The token itself never travels. A hello whose hash is wrong gets a refusal in
// place of the welcome, and no place among the pending sockets.
//
// The result is a Connection handed to the transport that asked: TCP builds its comms on the
// control and data sockets; verbs asks for no data sockets and keeps the one authenticated socket
// to exchange queue-pair set-up and, afterwards, as the liveness channel.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "net/connection.h"
#include "net/transport.h"
#include "net/wire.h"

namespace sieve::net {

// Which transport a connection is for. Both sides must agree: a verbs connection has no data
// sockets, so a TCP peer would wait for them. A mismatch is refused with a message naming
// SIEVE_TRANSPORT on both sides (the listener still answers, so the connector can say why).
enum class Carrier { kTcp, kVerbs };

class Connector {
 public:
  Connector(const TransportOptions& options, const wire::HandleFields& handle, Carrier carrier);
  // *done turns true once every socket finished its handshake; *out then holds the connection.
  // An error ends the attempt.
  Status progress(Connection* out, bool* done);
  const std::string& peer() const { return peer_; }

 private:
  enum class Stage { kConnecting, kSendHello, kReadWelcome, kSendProof, kDone };
  struct Socket {
    Fd fd;
    Stage stage = Stage::kConnecting;
    PartialMessage message;
    wire::Hello hello{};
    uint32_t caps = 0;
    int retries = 0;  // connects again after the listener dropped it before its welcome
  };
  Status step(Socket& s);
  Status dropped_before_welcome(Socket& s, const Status& cause);

  const TransportOptions options_;
  const Carrier carrier_;
  const wire::HandleFields handle_;
  const std::string peer_;
  const uint64_t connection_id_;
  const Clock::time_point deadline_;
  std::vector<Socket> sockets_;  // [0] control, then data
  bool started_ = false;
};

// The listening side's handshakes: authenticates incoming sockets, groups them by connection, drops
// strays, garbage, wrong nonces or tokens and the too slow.
//
// Anyone who can reach the port can open sockets, so what they may hold is bounded, and bounded so
// that a flood cannot push the real connector out: the kernel hands a socket over once its first
// bytes arrived (TCP_DEFER_ACCEPT, net/socket.h), a socket is read as soon as it is accepted, and
// one whose hello proved the job token (a keyed hash of the listener's nonce, the connection and the
// socket; without a token, the nonce) is never evicted for one that has not. Of those
// that have shown nothing, one source address holds at most a share (at it, its own oldest goes);
// with every place taken, the oldest of all goes. A connector whose socket was dropped before its
// welcome connects it again. Connections
// whose sockets authenticated but are not all there are bounded in number too (the oldest goes),
// and one socket that does not fit drops its whole connection. Warnings about dropped sockets
// are rate-limited: a port scanner must not flood the log either.
class HandshakeListener {
 public:
  HandshakeListener(const TransportOptions& options, Fd listener, uint64_t nonce, std::string address, Carrier carrier);
  // *got turns true when a peer completed its handshake; *out is then its connection.
  void accept(Connection* out, bool* got);
  // Connections dropped since the last call.
  uint64_t take_rejected();
  const std::string& address() const { return address_; }

 private:
  enum class Stage { kReadHello, kSendWelcome, kReadProof };
  struct Pending {
    Fd fd;
    std::string peer;
    std::string source;  // peer's address without the port
    Stage stage = Stage::kReadHello;
    PartialMessage message;
    wire::Hello hello{};
    uint64_t server_nonce = 0;
    Clock::time_point deadline;
    std::string refusal;  // set when the peer uses the other transport: refused once it has our welcome
  };
  struct Group {  // sockets of one incoming connection, by index
    std::vector<Fd> sockets;
    int present = 0;
    wire::Hello first{};
    std::string peer;
    Clock::time_point deadline;
  };
  void accept_new();
  // Makes room for `fresh` (already stepped once) among the pending sockets; false: drop `fresh`.
  bool make_room(const Pending& fresh);
  // False when the pending socket is finished (moved to a group or rejected).
  bool step(Pending& p);
  void reject(const std::string& peer, const std::string& reason);
  void warn(const std::string& what);  // within the warning budget
  bool join_group(Pending& p);
  void refuse_hello(const Pending& p);  // tells a peer its hello lacked the token's hash
  void drop_group(std::map<uint64_t, Group>::iterator it, const std::string& reason);

  const TransportOptions options_;
  const Carrier carrier_;
  Fd listener_;
  const uint64_t nonce_;
  const std::string address_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<uint64_t, Group> groups_;
  uint64_t rejected_ = 0;
  // Warning budget: a few lines per window, then one line saying how many more were dropped.
  Clock::time_point warn_window_{};
  int warned_in_window_ = 0;
  uint64_t unwarned_ = 0;
};

}  // namespace sieve::net
