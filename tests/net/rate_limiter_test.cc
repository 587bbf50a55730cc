// SPDX-License-Identifier: Apache-2.0
// SIEVE_RATE_LIMIT_MBPS: the token bucket's arithmetic on an injected clock, and a shaped transfer
// that still delivers exactly (its rate is measured by the benchmarks, never timed here).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "net/rate_limiter.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using Clock = TokenBucket::Clock;
using std::chrono::milliseconds;

TEST(TokenBucket, StartsFullGrantsTheBurstThenWaits) {
  const Clock::time_point t0{};
  TokenBucket b(1e6, 100000, t0);  // 1 MB/s, 100 kB burst
  EXPECT_EQ(b.take(60000, 1, t0).bytes, 60000u);
  EXPECT_EQ(b.take(60000, 1, t0).bytes, 40000u);  // what is left of the burst
  TokenBucket::Grant g = b.take(60000, 10000, t0);
  EXPECT_EQ(g.bytes, 0u);
  // 10 kB at 1 MB/s: 10 ms.
  EXPECT_NEAR(std::chrono::duration<double>(g.wait).count(), 0.010, 1e-6);
}

TEST(TokenBucket, RefillsAtItsRateUpToTheBurst) {
  const Clock::time_point t0{};
  TokenBucket b(1e6, 100000, t0);
  EXPECT_EQ(b.take(100000, 1, t0).bytes, 100000u);
  EXPECT_NEAR(b.tokens(t0 + milliseconds(25)), 25000.0, 1.0);
  EXPECT_NEAR(b.tokens(t0 + milliseconds(1000)), 100000.0, 1.0);  // capped at the burst
}

TEST(TokenBucket, OneSecondOfTakingMovesTheRate) {
  const Clock::time_point t0{};
  TokenBucket b(125e6 / 8, 4 * 131072, t0);  // 125 Mbit/s
  Clock::time_point now = t0;
  size_t sent = 0;
  while (now < t0 + std::chrono::seconds(1)) {
    TokenBucket::Grant g = b.take(65536, 65536, now);
    sent += g.bytes;
    if (!g.bytes) now += g.wait;
  }
  // One second's worth plus the initial burst, never more.
  EXPECT_LE(sent, static_cast<size_t>(125e6 / 8 + 4 * 131072 + 65536));
  EXPECT_GE(sent, static_cast<size_t>(125e6 / 8 - 65536));
}

TEST(TokenBucket, ChargesGoIntoDebtAndRefundsComeBack) {
  const Clock::time_point t0{};
  TokenBucket b(1e6, 10000, t0);
  b.charge(30000, t0);
  EXPECT_NEAR(b.tokens(t0), -20000.0, 1e-6);
  TokenBucket::Grant g = b.take(1000, 1000, t0);
  EXPECT_EQ(g.bytes, 0u);
  EXPECT_NEAR(std::chrono::duration<double>(g.wait).count(), 0.021, 1e-6);
  b.refund(25000);
  EXPECT_NEAR(b.tokens(t0), 5000.0, 1e-6);
}

TEST(TokenBucket, AFloorAboveTheBurstIsCappedAtTheBurst) {
  const Clock::time_point t0{};
  TokenBucket b(1e6, 1000, t0);
  EXPECT_EQ(b.take(65536, 65536, t0).bytes, 1000u);
}

TEST(RateLimitedTransport, DeliversExactly) {
  TransportOptions o = testing::loopback_options();
  o.rate_limit_mbps = 400;  // 50 MB/s: 4 MiB take about 80 ms
  auto tx = testing::make_transport(o);
  auto rx = testing::make_transport(testing::loopback_options());
  ASSERT_NE(tx, nullptr);
  ASSERT_NE(rx, nullptr);
  testing::Pair pair;
  ASSERT_TRUE(testing::connect_pair(*rx, *tx, &pair).ok());
  for (size_t size : {size_t(1000), size_t(4u << 20) + 5}) {
    std::vector<char> out(size), in(size, 0);
    for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i * 31 + 7);
    Request* r = nullptr;
    Request* s = nullptr;
    ASSERT_TRUE(pair.recv->irecv(in.data(), size, &r).ok());
    ASSERT_TRUE(pair.send->isend(out.data(), size, &s).ok());
    Completion cs, cr;
    Status st = testing::wait_both(s, &cs, r, &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cr.size, size);
    EXPECT_EQ(in, out);
  }
}

TEST(RateLimitedTransport, NegativeRateIsRefused) {
  TransportOptions o = testing::loopback_options();
  o.rate_limit_mbps = -1;
  std::unique_ptr<Transport> t;
  Status st = Transport::create_tcp(o, &t);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("SIEVE_RATE_LIMIT_MBPS"), std::string::npos);
}

}  // namespace
}  // namespace sieve::net
