// SPDX-License-Identifier: Apache-2.0
// Sender and receiver over loopback through the internal API: sizes from 0 B to 64 MiB, receives
// posted larger than the send, 32 outstanding requests, a send larger than its receive, a dead peer.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "tests/common/liveness.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using testing::connect_pair;
using testing::loopback_options;
using testing::make_transport;
using testing::Pair;

std::vector<char> pattern(size_t size, uint32_t seed) {
  std::vector<char> v(size);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<char>(x >> 24);
  }
  return v;
}

// Every behaviour holds whoever moves the data sockets: helper threads, the caller's thread inline
// (over two sockets and over one), and the auto shape of a single socket.
enum class Mover { kHelpers, kInline, kInlineSingleSocket, kAutoSingleSocket };

TransportOptions options_for(Mover mover) {
  TransportOptions o = loopback_options();
  switch (mover) {
    case Mover::kHelpers: o.progress = TransportOptions::Progress::kHelpers; break;
    case Mover::kInline: o.progress = TransportOptions::Progress::kInline; break;
    case Mover::kInlineSingleSocket:
      o.nsocks = 1;
      o.progress = TransportOptions::Progress::kInline;
      break;
    case Mover::kAutoSingleSocket:
      o.nsocks = 1;
      o.nthreads = 0;
      o.progress = TransportOptions::Progress::kAuto;
      break;
  }
  return o;
}

class TransportTest : public ::testing::TestWithParam<Mover> {
 protected:
  void SetUp() override {
    transport_ = make_transport(options_for(GetParam()));
    ASSERT_NE(transport_, nullptr);
    ASSERT_TRUE(connect_pair(*transport_, *transport_, &pair_).ok());
  }

  // One message each way through the pair; checks bytes and reported sizes.
  void roundtrip(size_t send_size, size_t recv_capacity, uint32_t seed) {
    std::vector<char> out = pattern(send_size, seed);
    std::vector<char> in(recv_capacity + 1, 0x5a);
    Request* r = nullptr;
    Request* s = nullptr;
    ASSERT_TRUE(pair_.recv->irecv(in.data(), recv_capacity, &r).ok());
    ASSERT_TRUE(pair_.send->isend(out.data(), send_size, &s).ok());
    ASSERT_NE(r, nullptr);
    ASSERT_NE(s, nullptr);
    Completion cr, cs;
    Status st = testing::wait_both(s, &cs, r, &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cs.size, send_size);
    EXPECT_EQ(cr.size, send_size);
    EXPECT_TRUE(cs.sent);
    EXPECT_FALSE(cr.sent);
    EXPECT_GE(cr.wire_bytes, send_size);
    EXPECT_EQ(cr.wire_bytes, cs.wire_bytes);
    if (send_size) {
      EXPECT_EQ(std::memcmp(in.data(), out.data(), send_size), 0) << "payload of " << send_size << " bytes differs";
    }
    EXPECT_EQ(in[recv_capacity], 0x5a) << "wrote past the posted buffer";
  }

  std::unique_ptr<Transport> transport_;
  Pair pair_;
};

TEST_P(TransportTest, SizesFromZeroToSixtyFourMiB) {
  const size_t sizes[] = {
      0, 1, 7, 4096, 16 * 1024, 16 * 1024 + 1, 100000, 128 * 1024, 1 << 20, 3 * 1000 * 1000 + 17, 64u << 20};
  uint32_t seed = 1;
  for (size_t size : sizes) roundtrip(size, size, seed++);
}

TEST_P(TransportTest, ReceivePostedLargerThanSendReportsRealSize) {
  roundtrip(0, 4096, 1);
  roundtrip(1000, 1 << 20, 2);
  roundtrip(300 * 1024, 8 << 20, 3);
}

TEST_P(TransportTest, ThirtyTwoOutstandingThenNullRequest) {
  constexpr int kCount = kMaxRequests;
  const size_t size = 40 * 1024;  // striped: exercises the helper threads
  std::vector<std::vector<char>> out, in;
  std::vector<Request*> sends(kCount), recvs(kCount);
  for (int i = 0; i < kCount; ++i) {
    out.push_back(pattern(size, i));
    in.emplace_back(size);
    ASSERT_TRUE(pair_.send->isend(out[i].data(), size, &sends[i]).ok());
    ASSERT_NE(sends[i], nullptr) << i;
    ASSERT_TRUE(pair_.recv->irecv(in[i].data(), size, &recvs[i]).ok());
    ASSERT_NE(recvs[i], nullptr) << i;
  }
  Request* extra = reinterpret_cast<Request*>(1);
  std::vector<char> spare(size);
  ASSERT_TRUE(pair_.send->isend(spare.data(), size, &extra).ok());
  EXPECT_EQ(extra, nullptr);
  extra = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(pair_.recv->irecv(spare.data(), size, &extra).ok());
  EXPECT_EQ(extra, nullptr);
  // Complete in reverse order of posting: test order must not matter.
  for (int i = kCount - 1; i >= 0; --i) {
    Completion cs, cr;
    Status st = testing::wait_both(sends[i], &cs, recvs[i], &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cr.size, size);
    EXPECT_EQ(in[i], out[i]) << "message " << i;
  }
  roundtrip(5, 5, 99);  // slots are reusable
}

TEST_P(TransportTest, SendLargerThanReceiveIsInvalidUsage) {
  std::vector<char> out = pattern(4096, 1);
  std::vector<char> in(1024 + 16, 0x11);
  Request *s = nullptr, *r = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), 1024, &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion c;
  Status st = testing::wait(r, &c);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.message();
  for (size_t i = 1024; i < in.size(); ++i) ASSERT_EQ(in[i], 0x11) << "overflow at " << i;
  // The comm stays failed: a later receive reports the same error instead of hanging.
  Request* again = nullptr;
  EXPECT_EQ(pair_.recv->irecv(in.data(), 1024, &again).code(), Code::kInvalidUsage);
  pair_.send.reset();  // its request never completes: close it before its buffer goes
}

TEST_P(TransportTest, LargeSendLargerThanReceiveIsInvalidUsage) {
  std::vector<char> out = pattern(1 << 20, 1);
  std::vector<char> in(64 * 1024);
  Request *s = nullptr, *r = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion c;
  EXPECT_EQ(testing::wait(r, &c).code(), Code::kInvalidUsage);
  pair_.send.reset();  // its request never completes: close it before its buffer goes
}

TEST_P(TransportTest, ClosedReceiverFailsPendingSend) {
  pair_.recv.reset();
  std::vector<char> out = pattern(8 << 20, 3);
  Status st;
  // A few sends: the first may still fit in kernel buffers; the failure must surface quickly.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8 && st.ok(); ++i) {
    Request* s = nullptr;
    st = pair_.send->isend(out.data(), out.size(), &s);
    if (st.ok() && s) {
      Completion c;
      st = testing::wait(s, &c, std::chrono::seconds(10));
    }
  }
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, liveness::bound(std::chrono::seconds(5)));
}

TEST_P(TransportTest, ClosedReceiverFailsSmallInlineSends) {
  pair_.recv.reset();
  char small[64] = {};
  Status st;
  auto start = std::chrono::steady_clock::now();
  while (st.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    Request* s = nullptr;
    st = pair_.send->isend(small, sizeof(small), &s);
    if (st.ok() && s) {
      Completion c;
      st = testing::wait(s, &c, std::chrono::seconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  EXPECT_NE(st.message().find("127.0.0.1"), std::string::npos) << "the error names the peer: " << st.message();
}

TEST_P(TransportTest, ClosedSenderFailsPendingReceive) {
  std::vector<char> in(1 << 20);
  Request* r = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  pair_.send.reset();
  Completion c;
  Status st = testing::wait(r, &c, std::chrono::seconds(5));
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
}

// A receiver that is alive but does not drain its socket for longer than SIEVE_PEER_TIMEOUT_MS (its
// receive posted late, as NCCL does while the GPU computes, or its process starved of CPU) is slow,
// not dead: the transfer must complete once it reads again. (The sender's kernel used to abort the
// connection when the zero window outlived TCP_USER_TIMEOUT, which was set to the peer timeout.)
TEST_P(TransportTest, AReceiverThatStopsReadingLongerThanThePeerTimeoutIsNotDeclaredDead) {
  TransportOptions options = options_for(GetParam());
  options.peer_timeout_ms = 300;
  auto transport = make_transport(options);
  ASSERT_NE(transport, nullptr);
  Pair pair;
  ASSERT_TRUE(connect_pair(*transport, *transport, &pair).ok());
  std::vector<char> out = pattern(64 << 20, 11);  // far more than the socket buffers hold
  Request* s = nullptr;
  ASSERT_TRUE(pair.send->isend(out.data(), out.size(), &s).ok());
  ASSERT_NE(s, nullptr);
  // The sender makes what progress it can while nobody reads, for several peer timeouts.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(6 * options.peer_timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    Completion c;
    Status st = s->test(&c);
    ASSERT_TRUE(st.ok()) << "a slow receiver was declared dead: " << st.message();
    ASSERT_FALSE(c.done) << "64 MiB cannot have been delivered to a receiver that never read";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<char> in(out.size());
  Request* r = nullptr;
  ASSERT_TRUE(pair.recv->irecv(in.data(), in.size(), &r).ok());
  Completion cs, cr;
  Status st = testing::wait_both(s, &cs, r, &cr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cr.size, out.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
}

TEST_P(TransportTest, ManyMessagesKeepOrder) {
  // Mixed inline and striped messages in flight together must arrive in posting order.
  const size_t sizes[] = {10, 200 * 1024, 0, 5000, 1 << 20, 17, 64 * 1024, 3};
  std::vector<std::vector<char>> out, in;
  std::vector<Request*> s, r;
  for (size_t i = 0; i < 8; ++i) {
    out.push_back(pattern(sizes[i], 100 + i));
    in.emplace_back(1 << 20);
    Request* rr = nullptr;
    ASSERT_TRUE(pair_.recv->irecv(in[i].data(), in[i].size(), &rr).ok());
    r.push_back(rr);
    Request* ss = nullptr;
    ASSERT_TRUE(pair_.send->isend(out[i].data(), sizes[i], &ss).ok());
    s.push_back(ss);
  }
  for (size_t i = 0; i < 8; ++i) {
    Completion cs, cr;
    ASSERT_TRUE(testing::wait_both(s[i], &cs, r[i], &cr).ok());
    ASSERT_EQ(cr.size, sizes[i]);
    if (sizes[i]) { EXPECT_EQ(std::memcmp(in[i].data(), out[i].data(), sizes[i]), 0) << i; }
  }
}

TEST(TransportIpv6, LoopbackRoundTrip) {
  TransportOptions o = loopback_options();
  o.devices.family = Family::kIPv6;
  std::unique_ptr<Transport> t;
  Status st = Transport::create_tcp(o, &t);
  if (!st.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << st.message();
  ASSERT_EQ(t->devices()[0].address.family(), AF_INET6);
  Pair pair;
  ASSERT_TRUE(connect_pair(*t, *t, &pair).ok());
  std::vector<char> out = pattern(300 * 1024, 5), in(out.size());
  Request *s = nullptr, *r = nullptr;
  ASSERT_TRUE(pair.recv->irecv(in.data(), in.size(), &r).ok());
  ASSERT_TRUE(pair.send->isend(out.data(), out.size(), &s).ok());
  Completion cs, cr;
  ASSERT_TRUE(testing::wait_both(s, &cs, r, &cr).ok());
  EXPECT_EQ(in, out);
  EXPECT_NE(pair.send->peer().find("[::1]"), std::string::npos) << pair.send->peer();
}

// The connecting side chooses the socket count; a listener with any setting takes what arrives.
size_t threads_in_process() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Inline means inline: a connection whose bytes the caller moves starts no thread at all, while
// helper progress (and auto, which measured better with helpers) starts its helpers.
TEST(TransportProgress, InlineConnectionsStartNoThreadsAndHelperConnectionsDo) {
  for (Mover mover : {Mover::kInline, Mover::kInlineSingleSocket, Mover::kAutoSingleSocket, Mover::kHelpers}) {
    auto transport = make_transport(options_for(mover));
    ASSERT_NE(transport, nullptr);
    const size_t before = threads_in_process();
    Pair pair;
    ASSERT_TRUE(connect_pair(*transport, *transport, &pair).ok());
    const size_t added = threads_in_process() - before;
    if (mover == Mover::kHelpers || mover == Mover::kAutoSingleSocket)
      EXPECT_GE(added, 2u) << "one helper per side at least";
    else EXPECT_EQ(added, 0u) << "inline progress started threads";
  }
}

// The rule the plugin applies and sieve-info restates: asked is asked, auto follows verbs.
TEST(TransportChoice, AskedIsTakenAndAutoFollowsWhetherVerbsAreUsable) {
  Transport::Choice c = Transport::choose(Transport::Asked::kTcp, true, 2, "");
  EXPECT_FALSE(c.verbs);
  EXPECT_EQ(c.why, "SIEVE_TRANSPORT=tcp");
  c = Transport::choose(Transport::Asked::kIb, true, 2, "");
  EXPECT_TRUE(c.verbs);
  EXPECT_EQ(c.why, "SIEVE_TRANSPORT=ib");
  c = Transport::choose(Transport::Asked::kAuto, true, 2, "");
  EXPECT_TRUE(c.verbs);
  EXPECT_EQ(c.why, "SIEVE_TRANSPORT=auto: libibverbs loaded and 2 active RDMA port(s) selected");
  c = Transport::choose(Transport::Asked::kAuto, false, 0, "no active RDMA port selected");
  EXPECT_FALSE(c.verbs);
  EXPECT_EQ(c.why, "SIEVE_TRANSPORT=auto: no active RDMA port selected");
}

TEST(TransportOptions, AutoAndExplicitShapesInteroperate) {
  TransportOptions automatic = loopback_options();
  automatic.nsocks = 0;
  automatic.nthreads = 0;
  TransportOptions explicit_four = loopback_options();
  explicit_four.nsocks = 4;
  explicit_four.nthreads = 3;
  auto a = make_transport(automatic);
  auto b = make_transport(explicit_four);
  ASSERT_TRUE(a && b);
  for (auto [listener, connector] :
       {std::pair{a.get(), b.get()}, std::pair{b.get(), a.get()}, std::pair{a.get(), a.get()}}) {
    Pair pair;
    ASSERT_TRUE(connect_pair(*listener, *connector, &pair).ok());
    std::vector<char> out = pattern(3 * 1000 * 1000 + 17, 9), in(out.size());
    Request *s = nullptr, *r = nullptr;
    ASSERT_TRUE(pair.recv->irecv(in.data(), in.size(), &r).ok());
    ASSERT_TRUE(pair.send->isend(out.data(), out.size(), &s).ok());
    Completion cs, cr;
    ASSERT_TRUE(testing::wait_both(s, &cs, r, &cr).ok());
    EXPECT_EQ(cr.size, out.size());
    EXPECT_EQ(in, out);
  }
}

TEST(TransportOptions, CloudNicsGetTheShapesNcclPicksForThemAndExplicitValuesStillWin) {
  TransportOptions o;
  const StripeShape aws = stripe_shape(o, 100000, kPciVendorAws);
  EXPECT_EQ(aws.nsocks, 16);
  EXPECT_EQ(aws.nthreads, 2);
  const StripeShape gcp = stripe_shape(o, 100000, kPciVendorGcp);
  EXPECT_EQ(gcp.nsocks, 4);
  EXPECT_EQ(gcp.nthreads, 4);
  EXPECT_EQ(stripe_shape(o, 100000, 0x15b3).nsocks, 4);  // any other vendor: by link speed
  o.nsocks = 2;
  EXPECT_EQ(stripe_shape(o, 100000, kPciVendorAws).nsocks, 2);
  EXPECT_EQ(stripe_shape(o, 100000, kPciVendorAws).nthreads, 1);
  o.nthreads = 2;
  EXPECT_EQ(stripe_shape(o, 100000, kPciVendorGcp).nthreads, 2);
}

TEST(TransportOptions, AutoShapeFollowsLinkSpeedAndExplicitValuesWin) {
  TransportOptions o;  // nsocks and nthreads 0: auto
  const StripeShape slow = stripe_shape(o, 10000, 0);
  EXPECT_EQ(slow.nsocks, 1);
  EXPECT_EQ(slow.nthreads, 1);
  const StripeShape fast = stripe_shape(o, 100000, 0);
  EXPECT_EQ(fast.nsocks, 4);
  EXPECT_EQ(fast.nthreads, 2);
  o.nsocks = 3;
  EXPECT_EQ(stripe_shape(o, 1000, 0).nsocks, 3);
  EXPECT_EQ(stripe_shape(o, 1000, 0).nthreads, 2);
  o.nthreads = 1;
  EXPECT_EQ(stripe_shape(o, 100000, 0).nthreads, 1);
}

TEST(TransportOptions, OutOfRangeValuesAreRefused) {
  TransportOptions o = loopback_options();
  std::unique_ptr<Transport> t;
  o.nsocks = -1;
  EXPECT_EQ(Transport::create_tcp(o, &t).code(), Code::kInvalidArgument);
  o = loopback_options();
  o.nsocks = 17;
  EXPECT_EQ(Transport::create_tcp(o, &t).code(), Code::kInvalidArgument);
  o = loopback_options();
  o.nthreads = 17;
  EXPECT_EQ(Transport::create_tcp(o, &t).code(), Code::kInvalidArgument);
  o = loopback_options();
  o.chunk_size = 100;
  EXPECT_EQ(Transport::create_tcp(o, &t).code(), Code::kInvalidArgument);
  o = loopback_options();
  Handle h;
  std::unique_ptr<ListenComm> l;
  ASSERT_TRUE(Transport::create_tcp(o, &t).ok());
  EXPECT_EQ(t->listen(3, &h, &l).code(), Code::kInvalidArgument);
}

std::string mover_name(const ::testing::TestParamInfo<Mover>& info) {
  switch (info.param) {
    case Mover::kHelpers: return "helpers";
    case Mover::kInline: return "inline";
    case Mover::kInlineSingleSocket: return "inline_single_socket";
    case Mover::kAutoSingleSocket: return "auto_single_socket";
  }
  return "unknown";
}
INSTANTIATE_TEST_SUITE_P(EveryMover, TransportTest,
                         ::testing::Values(Mover::kHelpers, Mover::kInline, Mover::kInlineSingleSocket,
                                           Mover::kAutoSingleSocket),
                         mover_name);

}  // namespace
}  // namespace sieve::net
