// SPDX-License-Identifier: Apache-2.0
// The stripe worker's system calls and wake-ups: plain stripes queued on a socket move together in
// one sendmsg/readv, a receiving helper sleeps until a batch spanning its queued stripes has
// arrived, and a helper already waiting on a socket for its stripes is not woken for more of them.
// Counted, never timed.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "net/tcp/stripe_worker.h"

namespace sieve::net {
namespace {

using std::chrono::milliseconds;

// A connected TCP pair over loopback: `near` is the worker's (non-blocking), `far` the test's (blocking).
struct TcpPair {
  Fd near, far;
};

TcpPair tcp_pair() {
  TcpPair p;
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(listener.get(), 1), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  p.far.reset(::socket(AF_INET, SOCK_STREAM, 0));
  timeval patience{20, 0};  // a test that goes wrong fails its read instead of hanging
  ::setsockopt(p.far.get(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  EXPECT_EQ(::connect(p.far.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  p.near.reset(::accept(listener.get(), nullptr, nullptr));
  ::fcntl(p.near.get(), F_SETFL, ::fcntl(p.near.get(), F_GETFL) | O_NONBLOCK);
  return p;
}

// One message of `count` plain stripes of `length` bytes each, with its wire bytes.
struct Message {
  std::vector<char> data;
  std::vector<Stripe> stripes;
  std::vector<char> wire;  // what the sender puts on the data socket
  std::atomic<uint32_t> stripes_left{0};

  Message(uint64_t sequence, size_t count, size_t length, char seed) : data(count * length) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(seed + i * 7);
    stripes_left = static_cast<uint32_t>(count);
    for (size_t j = 0; j < count; ++j) {
      Stripe s;
      s.expected = {static_cast<uint32_t>(length), sequence, j * length};
      wire::encode_chunk(s.expected, s.header);
      s.data = data.data() + j * length;
      s.length = length;
      s.stripes_left = &stripes_left;
      stripes.push_back(s);
      wire.insert(wire.end(), s.header, s.header + wire::kChunkHeaderBytes);
      wire.insert(wire.end(), s.data, s.data + length);
    }
  }
};

void write_all(int fd, const std::vector<char>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
}

std::vector<char> read_exactly(int fd, size_t bytes) {
  std::vector<char> out(bytes);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd, out.data() + done, bytes - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

size_t readable(int fd) {
  int n = 0;
  ::ioctl(fd, FIONREAD, &n);
  return static_cast<size_t>(n);
}

// Waits (bounded) until `ready` holds; the tests assert on what happened, never on how long it took.
template <typename Ready> bool eventually(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(StripeWorker, InlineReceiverReadsQueuedPlainStripesInOneCall) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kReceive, {p.near.get()}, -1, &failure, "test peer", 5000);
  worker.start_inline();
  Message sent(7, 4, 8192, 'a');
  Message received(7, 4, 8192, 'z');
  for (const Stripe& s : received.stripes) worker.enqueue(s);
  write_all(p.far.get(), sent.wire);
  ASSERT_TRUE(eventually([&] { return readable(p.near.get()) == sent.wire.size(); }));

  worker.progress(SIZE_MAX);

  EXPECT_FALSE(failure.failed()) << failure.get().message();
  EXPECT_EQ(received.stripes_left.load(), 0u);
  EXPECT_EQ(received.data, sent.data);
  EXPECT_EQ(worker.counters().transfers, 1u);  // one readv for the four stripes
}

TEST(StripeWorker, InlineSenderWritesQueuedPlainStripesInOneCall) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kSend, {p.near.get()}, -1, &failure, "test peer", 5000);
  worker.start_inline();
  Message m(3, 4, 8192, 'q');
  for (const Stripe& s : m.stripes) worker.enqueue(s);

  worker.progress(SIZE_MAX);

  EXPECT_FALSE(failure.failed()) << failure.get().message();
  EXPECT_EQ(m.stripes_left.load(), 0u);
  EXPECT_EQ(worker.counters().transfers, 1u);  // one sendmsg for the four stripes
  EXPECT_EQ(read_exactly(p.far.get(), m.wire.size()), m.wire);
}

TEST(StripeWorker, ABatchedReceiveChecksEveryStripesHeader) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kReceive, {p.near.get()}, -1, &failure, "test peer", 5000);
  worker.start_inline();
  Message sent(9, 3, 4096, 'b');
  sent.wire[2 * (wire::kChunkHeaderBytes + 4096) + 1] ^= 0x40;  // the third stripe's header
  Message received(9, 3, 4096, 'y');
  for (const Stripe& s : received.stripes) worker.enqueue(s);
  write_all(p.far.get(), sent.wire);
  ASSERT_TRUE(eventually([&] { return readable(p.near.get()) == sent.wire.size(); }));

  worker.progress(SIZE_MAX);

  ASSERT_TRUE(failure.failed());
  EXPECT_NE(failure.get().message().find("corrupt stream from test peer"), std::string::npos)
      << failure.get().message();
  EXPECT_EQ(received.stripes_left.load(), 1u);  // the first two were whole and checked
}

TEST(StripeWorker, AReceivingHelperSleepsUntilABatchSpanningItsQueuedStripesArrived) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kReceive, {p.near.get()}, -1, &failure, "test peer", 5000);
  Message sent(1, 4, 64 * 1024, 'c');
  Message received(1, 4, 64 * 1024, 'x');
  for (const Stripe& s : received.stripes) worker.enqueue(s);  // queued before the helper runs
  ASSERT_TRUE(worker.start().ok());
  ASSERT_TRUE(eventually([&] { return worker.waiting(); }));

  int lowat = 0;
  socklen_t len = sizeof lowat;
  ASSERT_EQ(::getsockopt(p.near.get(), SOL_SOCKET, SO_RCVLOWAT, &lowat, &len), 0);
  EXPECT_EQ(static_cast<size_t>(lowat), sent.wire.size());  // all four stripes, not the first alone

  write_all(p.far.get(), sent.wire);
  ASSERT_TRUE(eventually([&] { return received.stripes_left.load() == 0; }));
  EXPECT_EQ(received.data, sent.data);
}

TEST(StripeWorker, AHelperWaitingOnItsSocketIsNotWokenForMoreStripesOfIt) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kSend, {p.near.get()}, -1, &failure, "test peer", 5000);
  ASSERT_TRUE(worker.start().ok());
  Message first(1, 1, 16 << 20, 'd');  // more than the socket buffers hold: the helper blocks
  Message second(2, 1, 4096, 'e');
  worker.enqueue(first.stripes[0]);
  // Blocked: bytes reached the far end, the stripe is unfinished and the helper waits in poll()
  // with no transfer since the last look.
  uint64_t seen = UINT64_MAX;
  ASSERT_TRUE(eventually([&] {
    const uint64_t now = worker.counters().transfers;
    const bool settled = now == seen && worker.waiting() && readable(p.far.get()) > 0;
    seen = now;
    if (!settled) std::this_thread::sleep_for(milliseconds(20));
    return settled;
  }));
  ASSERT_EQ(first.stripes_left.load(), 1u);
  const uint64_t wakes = worker.counters().wakes;

  worker.enqueue(second.stripes[0]);

  EXPECT_EQ(worker.counters().wakes, wakes);  // its socket's progress brings it back, not an eventfd
  std::vector<char> expected = first.wire;
  expected.insert(expected.end(), second.wire.begin(), second.wire.end());
  EXPECT_EQ(read_exactly(p.far.get(), expected.size()), expected);
  ASSERT_TRUE(eventually([&] { return first.stripes_left.load() == 0 && second.stripes_left.load() == 0; }));
  EXPECT_FALSE(failure.failed());
}

TEST(StripeWorker, AnIdleHelperIsWokenForNewStripes) {
  TcpPair p = tcp_pair();
  Failure failure;
  StripeWorker worker(StripeWorker::Direction::kSend, {p.near.get()}, -1, &failure, "test peer", 5000);
  ASSERT_TRUE(worker.start().ok());
  ASSERT_TRUE(eventually([&] { return worker.waiting(); }));
  Message m(1, 2, 4096, 'f');
  for (const Stripe& s : m.stripes) worker.enqueue(s);
  EXPECT_EQ(read_exactly(p.far.get(), m.wire.size()), m.wire);
  ASSERT_TRUE(eventually([&] { return m.stripes_left.load() == 0; }));
  EXPECT_GE(worker.counters().wakes, 1u);
  EXPECT_FALSE(failure.failed());
}

}  // namespace
}  // namespace sieve::net
