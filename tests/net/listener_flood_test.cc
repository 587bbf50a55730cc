// SPDX-License-Identifier: Apache-2.0
// What reaching the listening port can make a listener hold, against a real listener on loopback:
// a flood of idle connections must not push the real connector out, its warnings are rate-limited,
// and authenticated connections that never bring their other sockets cannot exhaust descriptors.
// Every test is bounded in sockets (a few hundred) and in time (deadlines of seconds).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "net/log.h"
#include "net/socket.h"
#include "net/wire.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using testing::loopback_options;
using testing::make_transport;
using Steady = std::chrono::steady_clock;

Fd raw_client(const wire::HandleFields& fields) {
  Fd fd(::socket(fields.address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&fields.address.storage), fields.address.length), 0)
      << std::strerror(errno);
  return fd;
}

// True once the listener closed its end (EOF or reset), false while it holds it open.
bool closed_by_listener(int fd) {
  char b;
  const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

struct Listening {
  std::unique_ptr<Transport> transport;
  Handle handle;
  wire::HandleFields fields;
  std::unique_ptr<ListenComm> listener;

  explicit Listening(const TransportOptions& o) : transport(make_transport(o)) {
    EXPECT_TRUE(transport->listen(0, &handle, &listener).ok());
    EXPECT_TRUE(wire::decode_handle(handle.bytes, &fields).ok());
  }
  uint64_t poll_listener() {
    std::unique_ptr<RecvComm> none;
    EXPECT_TRUE(listener->accept(&none).ok());
    EXPECT_EQ(none, nullptr);
    return listener->take_rejected();
  }
};

// Connects a real connector while the test keeps calling accept; floods `per_round` more idle
// sockets per round (keeping at most `keep_open` of them open here). True once both comms exist.
bool connect_through(Listening& l, Transport& connector, std::deque<Fd>* idle, int per_round, size_t keep_open,
                     std::string* why) {
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
  Status cs, as;
  const auto end = Steady::now() + std::chrono::seconds(10);
  while ((!send || !recv) && Steady::now() < end) {
    if (!send && cs.ok()) cs = connector.connect(0, &l.handle, &send);
    if (!recv && as.ok()) as = l.listener->accept(&recv);
    if (!cs.ok() || !as.ok()) break;
    for (int i = 0; i < per_round; ++i) {
      idle->push_back(raw_client(l.fields));
      if (idle->size() > keep_open) idle->pop_front();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  *why = cs.message() + " / " + as.message();
  return send && recv;
}

TEST(ListenerFlood, IdleFloodDoesNotEvictTheRealConnector) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;  // nothing here may be saved by the idle sockets timing out
  Listening l(o);
  auto connector = make_transport(o);
  std::deque<Fd> idle;
  // The pending set full of sockets that say nothing...
  for (int i = 0; i < 128; ++i) idle.push_back(raw_client(l.fields));
  for (int i = 0; i < 4; ++i) l.poll_listener();
  // ...the real connector connects and sends its hello...
  std::unique_ptr<SendComm> send;
  for (int i = 0; i < 3 && !send; ++i) {
    ASSERT_TRUE(connector->connect(0, &l.handle, &send).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // ...and more silent sockets queue behind it before the listener next looks.
  ASSERT_EQ(send, nullptr);
  for (int i = 0; i < 200; ++i) idle.push_back(raw_client(l.fields));
  // The flood goes on while the connection is made (bounded: 10 sockets a round, 400 open here).
  std::string why;
  EXPECT_TRUE(connect_through(l, *connector, &idle, 10, 400, &why)) << why;
}

TEST(ListenerFlood, AConnectorArrivingDuringAFloodConnects) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  auto connector = make_transport(o);
  std::deque<Fd> idle;
  for (int i = 0; i < 150; ++i) idle.push_back(raw_client(l.fields));
  std::string why;
  EXPECT_TRUE(connect_through(l, *connector, &idle, 20, 400, &why)) << why;
}

std::atomic<int> g_warnings{0};
void count_warnings(log::Level level, log::Subsystem, const char*, int, const char*) {
  if (level == log::Level::kWarn) g_warnings.fetch_add(1);
}

TEST(ListenerFlood, DropWarningsAreRateLimited) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  g_warnings = 0;
  log::set_sink(count_warnings);
  uint64_t dropped = 0;
  std::deque<Fd> idle;
  const auto start = Steady::now();
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 100; ++i) {
      idle.push_back(raw_client(l.fields));
      // A byte of garbage, not a whole hello: handed over at once (silent sockets wait in the kernel).
      ASSERT_EQ(::send(idle.back().get(), "x", 1, MSG_NOSIGNAL), 1);
    }
    for (int i = 0; i < 4; ++i) dropped += l.poll_listener();
  }
  log::set_sink(nullptr);
  EXPECT_GE(dropped, 200u);  // 400 sockets that say nothing valid, far beyond what the listener keeps
  // The listener warns a few lines per 10 s window (and one line for the rest): bounded per window
  // that the flood lasted, so a slow machine gets its windows and no timing is assumed.
  const long windows = 1 + std::chrono::duration_cast<std::chrono::seconds>(Steady::now() - start).count() / 10;
  EXPECT_LE(g_warnings.load(), 10 * windows) << "one warning per dropped socket floods the log";
  EXPECT_GE(g_warnings.load(), 1) << "drops must still be reported";
}

// Hello, welcome and proof for one socket of connection `id`, as a peer that knows the listener's
// nonce (and the token, here none) would send them. The listener is driven between the steps.
Fd authenticated_socket(Listening& l, uint64_t id, uint16_t index, uint16_t nsocks) {
  Fd fd = raw_client(l.fields);
  wire::Hello hello{index, nsocks, 0, l.fields.listener_nonce, id, 1000 + id, 128 * 1024};
  hello.mac = wire::hello_mac("", hello);
  uint8_t out[wire::kHelloBytes];
  wire::encode_hello(hello, out);
  EXPECT_EQ(::send(fd.get(), out, sizeof(out), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(out)));
  uint8_t in[wire::kWelcomeBytes];
  size_t got = 0;
  const auto end = Steady::now() + std::chrono::seconds(5);
  while (got < sizeof(in) && Steady::now() < end) {
    l.poll_listener();
    const ssize_t n = ::recv(fd.get(), in + got, sizeof(in) - got, MSG_DONTWAIT);
    if (n > 0) got += n;
    else if (n == 0) break;
  }
  EXPECT_EQ(got, sizeof(in)) << "no welcome for socket " << index << " of connection " << id;
  if (got != sizeof(in)) return fd;
  wire::Welcome w;
  EXPECT_TRUE(wire::decode_welcome(in, &w).ok());
  uint8_t proof[wire::kProofBytes];
  wire::encode_proof({wire::handshake_mac("", wire::Role::kConnector, hello, w.server_nonce)}, proof);
  EXPECT_EQ(::send(fd.get(), proof, sizeof(proof), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(proof)));
  l.poll_listener();
  return fd;
}

// A socket to the listener from source address `source`: any local user can bind all of 127/8.
Fd client_from(const wire::HandleFields& fields, const std::string& source) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, source.c_str(), &from.sin_addr), 1);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&from), sizeof(from)), 0) << std::strerror(errno);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&fields.address.storage), fields.address.length), 0)
      << std::strerror(errno);
  return fd;
}

// Sends the rest of socket `index`'s hello (its first `sent` bytes went already), reads the welcome
// and proves; false when the listener dropped the socket instead.
bool finish_handshake(Listening& l, int fd, uint64_t id, uint16_t index, uint16_t nsocks, size_t sent) {
  wire::Hello hello{index, nsocks, 0, l.fields.listener_nonce, id, 1000 + id, 128 * 1024};
  hello.mac = wire::hello_mac("", hello);
  uint8_t out[wire::kHelloBytes];
  wire::encode_hello(hello, out);
  if (::send(fd, out + sent, sizeof(out) - sent, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(out) - sent))
    return false;
  uint8_t in[wire::kWelcomeBytes];
  size_t got = 0;
  const auto end = Steady::now() + std::chrono::seconds(5);
  while (got < sizeof(in) && Steady::now() < end) {
    l.poll_listener();
    const ssize_t n = ::recv(fd, in + got, sizeof(in) - got, MSG_DONTWAIT);
    if (n > 0) got += n;
    else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
  }
  wire::Welcome w;
  if (got != sizeof(in) || !wire::decode_welcome(in, &w).ok()) return false;
  uint8_t proof[wire::kProofBytes];
  wire::encode_proof({wire::handshake_mac("", wire::Role::kConnector, hello, w.server_nonce)}, proof);
  return ::send(fd, proof, sizeof(proof), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(proof));
}

// True once the listener hands over a connection (all its sockets proved), within 5 s.
bool accepted(Listening& l) {
  std::unique_ptr<RecvComm> recv;
  const auto end = Steady::now() + std::chrono::seconds(5);
  while (!recv && Steady::now() < end) {
    if (!l.listener->accept(&recv).ok()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return recv != nullptr;
}

// Over a link with delay the real connector's sockets were accepted before their
// hellos arrived, and a flood from many source addresses pushed them out first: as the source
// holding most, all its sockets opened at once from one address. Here its 9 sockets connect and
// their hellos are held back while 253 other addresses open silent sockets.
TEST(ListenerFlood, AFloodFromManyAddressesDoesNotPushOutAConnectorWhoseHellosAreLate) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  constexpr uint16_t kNsocks = 8;
  std::vector<Fd> real;
  for (int i = 0; i <= kNsocks; ++i) real.push_back(raw_client(l.fields));
  for (int i = 0; i < 4; ++i) l.poll_listener();
  std::vector<Fd> flood;
  for (int a = 1; a <= 253; ++a) {
    flood.push_back(client_from(l.fields, "127.0.1." + std::to_string(a)));
    if (a % 16 == 0) l.poll_listener();
  }
  for (int i = 0; i < 8; ++i) l.poll_listener();
  for (uint16_t i = 0; i <= kNsocks; ++i)
    EXPECT_TRUE(finish_handshake(l, real[i].get(), 4242, i, kNsocks, 0)) << "socket " << i << " was dropped";
  EXPECT_TRUE(accepted(l));
}

// The same when the kernel hands the sockets over before their hellos are whole (a first byte came,
// or it could not wait: past TCP_DEFER_ACCEPT's queue, under a flood, connections come with SYN
// cookies): with every place taken by 128 other addresses, the newcomer's sockets must push out the
// oldest, not each other, and outlast a smaller flood that follows.
TEST(ListenerFlood, APoolFullOfOtherAddressesMakesRoomForANewConnector) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  std::vector<Fd> flood;
  auto flood_more = [&](int from, int to) {
    for (int a = from; a < to; ++a) {
      flood.push_back(
          client_from(l.fields, "127.0." + std::to_string(1 + a / 250) + "." + std::to_string(1 + a % 250)));
      ASSERT_EQ(::send(flood.back().get(), "x", 1, MSG_NOSIGNAL), 1);  // garbage, but not a whole hello
      if (a % 16 == 0) l.poll_listener();
    }
    for (int i = 0; i < 8; ++i) l.poll_listener();
  };
  flood_more(0, 128);
  constexpr uint16_t kNsocks = 8;
  const uint64_t id = 4343;
  std::vector<Fd> real;
  for (uint16_t i = 0; i <= kNsocks; ++i) {
    real.push_back(raw_client(l.fields));
    wire::Hello hello{i, kNsocks, 0, l.fields.listener_nonce, id, 1000 + id, 128 * 1024};
    hello.mac = wire::hello_mac("", hello);
    uint8_t out[wire::kHelloBytes];
    wire::encode_hello(hello, out);
    ASSERT_EQ(::send(real.back().get(), out, 1, MSG_NOSIGNAL), 1);  // the first byte of its hello
  }
  for (int i = 0; i < 8; ++i) l.poll_listener();
  flood_more(128, 192);
  for (uint16_t i = 0; i <= kNsocks; ++i)
    EXPECT_TRUE(finish_handshake(l, real[i].get(), id, i, kNsocks, 1)) << "socket " << i << " was dropped";
  EXPECT_TRUE(accepted(l));
}

TEST(ListenerFlood, IncompleteAuthenticatedConnectionsCannotExhaustDescriptors) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  // Socket 0 of a 16-socket connection, again and again: each parks a descriptor in the listener.
  constexpr int kGroups = 200;
  std::vector<Fd> parked;
  for (int i = 0; i < kGroups; ++i) parked.push_back(authenticated_socket(l, 1 + i, 0, 16));
  for (int i = 0; i < 4; ++i) l.poll_listener();
  int still_held = 0;
  for (const Fd& fd : parked) still_held += closed_by_listener(fd.get()) ? 0 : 1;
  EXPECT_LE(still_held, 16) << "the listener holds a descriptor for every incomplete connection";
  // The real peer still connects.
  auto connector = make_transport(o);
  std::deque<Fd> none;
  std::string why;
  EXPECT_TRUE(connect_through(l, *connector, &none, 0, 0, &why)) << why;
}

TEST(ListenerFlood, ASocketThatDoesNotFitDropsItsWholeConnection) {
  TransportOptions o = loopback_options();
  o.peer_timeout_ms = 20000;
  Listening l(o);
  Fd first = authenticated_socket(l, 77, 0, 2);
  Fd again = authenticated_socket(l, 77, 0, 2);  // socket 0 twice: not a connection NCCL made
  bool closed = false;
  const auto end = Steady::now() + std::chrono::seconds(5);
  while (!closed && Steady::now() < end) {
    l.poll_listener();
    closed = closed_by_listener(first.get());
  }
  EXPECT_TRUE(closed) << "the connection's first socket stays parked after its group went bad";
}

}  // namespace
}  // namespace sieve::net
