// SPDX-License-Identifier: Apache-2.0
// Fuzzes the handshake listener's state machine (net/handshake.cc) against a real listening socket
// on loopback, fed by up to 24 client sockets the input drives: connect, raw bytes in pieces of any
// size (partial reads), well-formed hellos with chosen fields (right or wrong nonce, right or
// wrong keyed hash, connection ids from a small set so groups form, clash and overflow), proofs
// computed from the welcome read back (right or wrong), closes; the listener is polled after every step. A connection
// it hands out must have every socket and the fields one hello asked for.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "net/handshake.h"
#include "net/log.h"
#include "net/socket.h"

using namespace sieve::net;

namespace {

constexpr uint64_t kNonce = 0x5eed5eed12345678ull;
constexpr size_t kMaxClients = 24;

struct Input {
  const uint8_t* data;
  size_t size;
  uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
};

struct Client {
  Fd fd;
  wire::Hello hello{};
  bool sent_hello = false;
};

Fd connect_to(const SocketAddress& address) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  // Reset on close: thousands of runs must not fill the port range with TIME_WAIT.
  const linger reset{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length);
  return fd;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sieve::log::set_stderr_level(sieve::log::Level::kNone);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  SocketAddress loopback;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::memcpy(&loopback.storage, &a, sizeof a);
  loopback.length = sizeof a;
  Fd listen_fd;
  SocketAddress bound;
  if (!make_listener(loopback, &listen_fd, &bound).ok()) return 0;
  TransportOptions options;
  options.peer_timeout_ms = 60000;  // no deadline inside one run: the outcome must not depend on timing
  const Carrier carrier = (in.byte() & 1) ? Carrier::kVerbs : Carrier::kTcp;
  HandshakeListener listener(options, std::move(listen_fd), kNonce, bound.text(), carrier);
  std::vector<Client> clients;

  for (int steps = 0; steps < 64 && in.size > 0; ++steps) {
    const uint8_t op = in.byte();
    Client* c = clients.empty() ? nullptr : &clients[in.byte() % clients.size()];
    switch (op % 6) {
      case 0:
        if (clients.size() < kMaxClients) clients.push_back(Client{connect_to(bound)});
        break;
      case 1: {  // raw bytes, any length: partial and garbage messages
        if (!c) break;
        const size_t n = std::min<size_t>(in.byte() % 64, in.size);
        ::send(c->fd.get(), in.data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        in.data += n;
        in.size -= n;
        break;
      }
      case 2: {  // a well-formed hello with chosen fields
        if (!c) break;
        const uint8_t flags = in.byte();
        c->hello.socket_index = in.byte() % 18;
        c->hello.nsocks = in.byte() % 18;
        c->hello.caps = in.byte() & 3;
        c->hello.listener_nonce = (flags & 1) ? in.u64() : kNonce;
        c->hello.connection_id = in.byte() % 4;
        c->hello.client_nonce = in.u64();
        c->hello.chunk_size = (flags & 2) ? in.u64() : 128 * 1024;
        c->hello.mac = wire::hello_mac("", c->hello);
        if (flags & 8) c->hello.mac[in.byte() % c->hello.mac.size()] ^= 1 | in.byte();  // knows the nonce only
        uint8_t bytes[wire::kHelloBytes];
        wire::encode_hello(c->hello, bytes);
        const size_t cut = (flags & 4) ? in.byte() % sizeof bytes : sizeof bytes;  // the rest never comes
        ::send(c->fd.get(), bytes, cut, MSG_NOSIGNAL | MSG_DONTWAIT);
        c->sent_hello = true;
        break;
      }
      case 3: {  // read the welcome if it is there, answer with a proof (right or wrong)
        if (!c || !c->sent_hello) break;
        uint8_t welcome[wire::kWelcomeBytes];
        if (::recv(c->fd.get(), welcome, sizeof welcome, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof welcome)) break;
        wire::Welcome w;
        if (!wire::decode_welcome(welcome, &w).ok()) break;
        check(w.refusal == wire::Refusal::kNone || (w.mac == Digest{} && w.server_nonce == 0));
        if (w.refusal != wire::Refusal::kNone) break;
        wire::Proof proof{wire::handshake_mac("", wire::Role::kConnector, c->hello, w.server_nonce)};
        if (in.byte() & 1) proof.mac[0] ^= 1;
        uint8_t bytes[wire::kProofBytes];
        wire::encode_proof(proof, bytes);
        ::send(c->fd.get(), bytes, sizeof bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
        break;
      }
      case 4:
        if (c) c->fd.reset();
        break;
      default: break;
    }
    Connection out;
    bool got = false;
    listener.accept(&out, &got);
    if (got) {
      check(out.control.valid());
      for (const Fd& fd : out.data) check(fd.valid());
      check(carrier == Carrier::kVerbs ? out.data.empty() : !out.data.empty());
    }
    listener.take_rejected();
  }
  return 0;
}
