// SPDX-License-Identifier: Apache-2.0
// Listener robustness: stray and garbage clients are dropped while the real peer still connects;
// the job token is proven, never sent; a wrong token is refused on both sides.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "net/handshake.h"
#include "net/socket.h"
#include "net/wire.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using testing::loopback_options;
using testing::make_transport;

// A raw TCP client to the listener named by a handle.
Fd raw_client(const Handle& handle) {
  wire::HandleFields fields;
  EXPECT_TRUE(wire::decode_handle(handle.bytes, &fields).ok());
  Fd fd(::socket(fields.address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&fields.address.storage), fields.address.length), 0);
  return fd;
}

struct Connecting {
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
  Status connect_status;
  Status accept_status;
  uint64_t rejected = 0;
};

// Drives connect and accept until both finish, one fails, or the deadline passes.
void drive(Transport& a, Transport& b, Handle& handle, ListenComm& listener, Connecting* c,
           std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while ((!c->send || !c->recv) && std::chrono::steady_clock::now() < end) {
    if (!c->send && c->connect_status.ok()) c->connect_status = b.connect(0, &handle, &c->send);
    if (!c->recv && c->accept_status.ok()) c->accept_status = listener.accept(&c->recv);
    c->rejected += listener.take_rejected();
    if (!c->connect_status.ok() && !c->recv) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  (void)a;
}

void expect_working(Connecting& c) {
  ASSERT_TRUE(c.send && c.recv) << c.connect_status.message() << " / " << c.accept_status.message();
  char out[100], in[100] = {};
  std::memset(out, 7, sizeof(out));
  Request *s = nullptr, *r = nullptr;
  ASSERT_TRUE(c.recv->irecv(in, sizeof(in), &r).ok());
  ASSERT_TRUE(c.send->isend(out, sizeof(out), &s).ok());
  Completion cs, cr;
  ASSERT_TRUE(testing::wait_both(s, &cs, r, &cr).ok());
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
}

TEST(Handshake, GarbageAndWrongNonceClientsAreDroppedRealPeerConnects) {
  auto t = make_transport(loopback_options());
  ASSERT_NE(t, nullptr);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(t->listen(0, &handle, &listener).ok());

  Fd garbage = raw_client(handle);
  const char junk[64] = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  ASSERT_EQ(::send(garbage.get(), junk, sizeof(junk), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(junk)));

  Fd stale = raw_client(handle);  // speaks the protocol but presents another listener's nonce
  wire::Hello hello{0, 1, 0, 0x1234, 42, 7, 128 * 1024};
  uint8_t bytes[wire::kHelloBytes];
  wire::encode_hello(hello, bytes);
  ASSERT_EQ(::send(stale.get(), bytes, sizeof(bytes), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(bytes)));

  Connecting c;
  drive(*t, *t, handle, *listener, &c);
  expect_working(c);
  // Both bad clients were dropped, and the listener closed them.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (c.rejected < 2 && std::chrono::steady_clock::now() < end) {
    std::unique_ptr<RecvComm> none;
    ASSERT_TRUE(listener->accept(&none).ok());
    c.rejected += listener->take_rejected();
  }
  EXPECT_EQ(c.rejected, 2u);
  char b;
  EXPECT_LE(::recv(garbage.get(), &b, 1, 0), 0);
}

// A listener under a flood may drop a real connector's socket before reading its
// hello; the connector connects that socket again instead of failing the connect. Here a stand-in
// listener drops the first socket it accepts and completes the handshake of every other.
TEST(Handshake, ASocketDroppedBeforeItsWelcomeConnectsAgain) {
  TransportOptions o = loopback_options();
  o.nsocks = 1;
  o.nthreads = 1;
  SocketAddress any;
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::memcpy(&any.storage, &loopback, sizeof(loopback));
  any.length = sizeof(loopback);
  Fd listening;
  SocketAddress bound;
  ASSERT_TRUE(make_listener(any, &listening, &bound).ok());
  wire::HandleFields fields;
  fields.address = bound;
  fields.listener_nonce = 0x5eed;
  std::atomic<int> accepted{0}, welcomed{0};
  std::thread listener([&] {
    const int flags = ::fcntl(listening.get(), F_GETFL);
    ::fcntl(listening.get(), F_SETFL, flags & ~O_NONBLOCK);
    std::vector<Fd> kept;
    while (welcomed.load() < 2) {
      Fd fd(::accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) return;
      if (accepted.fetch_add(1) == 0) continue;  // dropped unread, as under a flood
      uint8_t in[wire::kHelloBytes];
      if (::recv(fd.get(), in, sizeof(in), MSG_WAITALL) != static_cast<ssize_t>(sizeof(in))) return;
      wire::Hello hello;
      if (!wire::decode_hello(in, &hello).ok()) return;
      uint8_t out[wire::kWelcomeBytes];
      wire::encode_welcome({0, 77, wire::handshake_mac("", wire::Role::kListener, hello, 77)}, out);
      if (::send(fd.get(), out, sizeof(out), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(out))) return;
      uint8_t proof[wire::kProofBytes];
      if (::recv(fd.get(), proof, sizeof(proof), MSG_WAITALL) != static_cast<ssize_t>(sizeof(proof))) return;
      welcomed.fetch_add(1);
      kept.push_back(std::move(fd));
    }
  });
  Connector connector(o, fields, Carrier::kTcp);
  Connection connection;
  bool done = false;
  Status st;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && st.ok() && std::chrono::steady_clock::now() < end) {
    st = connector.progress(&connection, &done);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(done);
  EXPECT_EQ(accepted.load(), 3) << "two sockets, one of them twice";
  ::shutdown(listening.get(), SHUT_RDWR);
  listener.join();
}

TEST(Handshake, SilentClientDoesNotBlockAndIsDroppedAfterTimeout) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 300;
  auto t = make_transport(o);
  ASSERT_NE(t, nullptr);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(t->listen(0, &handle, &listener).ok());
  Fd silent = raw_client(handle);  // connects and never says a word

  Connecting c;
  drive(*t, *t, handle, *listener, &c);
  expect_working(c);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  uint64_t rejected = c.rejected;
  while (rejected == 0 && std::chrono::steady_clock::now() < end) {
    std::unique_ptr<RecvComm> none;
    ASSERT_TRUE(listener->accept(&none).ok());
    rejected += listener->take_rejected();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(rejected, 1u);
}

TEST(Handshake, MatchingJobTokenConnects) {
  TransportOptions o = loopback_options();
  o.job_token = "9c41d2e07b5a3f86d1e04a7c2b9f5e31";  // a token the rule accepts (net/job_token.h)
  auto a = make_transport(o);
  auto b = make_transport(o);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(a->listen(0, &handle, &listener).ok());
  Connecting c;
  drive(*a, *b, handle, *listener, &c);
  expect_working(c);
  EXPECT_EQ(c.rejected, 0u);
}

void expect_refused(const std::string& listener_token, const std::string& connector_token) {
  TransportOptions lo = loopback_options(), co = loopback_options();
  lo.job_token = listener_token;
  co.job_token = connector_token;
  auto a = make_transport(lo);
  auto b = make_transport(co);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(a->listen(0, &handle, &listener).ok());
  Connecting c;
  drive(*a, *b, handle, *listener, &c, std::chrono::seconds(3));
  EXPECT_EQ(c.connect_status.code(), Code::kRemoteError);
  EXPECT_NE(c.connect_status.message().find("job token"), std::string::npos) << c.connect_status.message();
  EXPECT_EQ(c.recv, nullptr);
}

TEST(Handshake, WrongJobTokenIsRefused) { expect_refused("alpha", "beta"); }
TEST(Handshake, TokenOnOneSideOnlyIsRefused) {
  expect_refused("alpha", "");
  expect_refused("", "alpha");
}

TEST(Handshake, TokenNeverTravels) {
  // The connector's messages are a hello and a proof: neither may contain the token's bytes.
  const std::string token = "TOKEN-THAT-MUST-NOT-LEAK";
  wire::Hello hello{1, 2, 0, 11, 22, 33, 1 << 20};
  hello.mac = wire::hello_mac(token, hello);
  uint8_t bytes[wire::kHelloBytes + wire::kProofBytes];
  wire::encode_hello(hello, bytes);
  wire::encode_proof({wire::handshake_mac(token, wire::Role::kConnector, hello, 44)}, bytes + wire::kHelloBytes);
  std::string all(reinterpret_cast<char*>(bytes), sizeof(bytes));
  EXPECT_EQ(all.find(token.substr(0, 6)), std::string::npos);
}

// Reads what the listener sends on `fd` until it closes it or `wait` passes, accepting meanwhile;
// true when it closed. *sent: what it sent.
bool closed_by_listener(ListenComm& listener, int fd, std::string* sent,
                        std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < end) {
    std::unique_ptr<RecvComm> none;
    if (!listener.accept(&none).ok()) return false;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    if (n > 0) sent->append(buf, n);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// NCCL's handle crosses the bootstrap in clear: whoever saw it knows the nonce. Without the token,
// its hello must earn neither a welcome nor a place held until the peer timeout (a flood of such
// hellos took the places of a real connector's sockets while their proofs crossed the link).
TEST(Handshake, AHelloThatKnowsOnlyTheNonceIsRefusedAtOnce) {
  TransportOptions o = loopback_options();
  o.job_token = "9c41d2e07b5a3f86d1e04a7c2b9f5e31";
  o.peer_timeout_ms = 60000;
  auto t = make_transport(o);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(t->listen(0, &handle, &listener).ok());
  wire::HandleFields fields;
  ASSERT_TRUE(wire::decode_handle(handle.bytes, &fields).ok());
  for (const std::string guess : {"", "0000000000000000000000000000000a"}) {
    Fd fd = raw_client(handle);
    wire::Hello hello{0, 1, 0, fields.listener_nonce, 42, 7, 128 * 1024};
    hello.mac = wire::hello_mac(guess, hello);
    uint8_t bytes[wire::kHelloBytes];
    wire::encode_hello(hello, bytes);
    ASSERT_EQ(::send(fd.get(), bytes, sizeof(bytes), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(bytes)));
    std::string sent;
    EXPECT_TRUE(closed_by_listener(*listener, fd.get(), &sent)) << "the listener kept the socket";
    ASSERT_EQ(sent.size(), wire::kWelcomeBytes);
    wire::Welcome w;
    ASSERT_TRUE(wire::decode_welcome(reinterpret_cast<const uint8_t*>(sent.data()), &w).ok());
    EXPECT_EQ(w.refusal, wire::Refusal::kHelloMac);
    EXPECT_EQ(w.server_nonce, 0u);
    EXPECT_EQ(w.mac, Digest{}) << "a refusal must not be a keyed hash to test token guesses against";
  }
  EXPECT_EQ(listener->take_rejected(), 2u);
}

// A peer of another wire version is told so as soon as its hello's first bytes are there, not when
// a hello of this version's length would be complete (one of version 1 is shorter: never).
TEST(Handshake, AHelloOfAnotherVersionIsDroppedAtOnce) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 60000;
  auto t = make_transport(o);
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(t->listen(0, &handle, &listener).ok());
  wire::HandleFields fields;
  ASSERT_TRUE(wire::decode_handle(handle.bytes, &fields).ok());
  wire::Hello hello{0, 1, 0, fields.listener_nonce, 42, 7, 128 * 1024};
  uint8_t bytes[wire::kHelloBytes];
  wire::encode_hello(hello, bytes);
  bytes[4] = 1;  // version 1, whose hello ended after 48 bytes
  Fd fd = raw_client(handle);
  ASSERT_EQ(::send(fd.get(), bytes, 48, MSG_NOSIGNAL), 48);
  std::string sent;
  EXPECT_TRUE(closed_by_listener(*listener, fd.get(), &sent)) << "the listener waited for the rest";
  EXPECT_EQ(listener->take_rejected(), 1u);
}

TEST(Handshake, ConnectToNothingFailsWithoutHanging) {
  auto t = make_transport(loopback_options());
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  ASSERT_TRUE(t->listen(0, &handle, &listener).ok());
  listener.reset();  // port closed: connection refused
  std::unique_ptr<SendComm> send;
  Status st;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (st.ok() && !send && std::chrono::steady_clock::now() < end) st = t->connect(0, &handle, &send);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
}

TEST(Handshake, ForeignHandleIsInvalidArgument) {
  auto t = make_transport(loopback_options());
  Handle handle;
  std::memset(handle.bytes, 0xab, sizeof(handle.bytes));
  std::unique_ptr<SendComm> send;
  EXPECT_EQ(t->connect(0, &handle, &send).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sieve::net
