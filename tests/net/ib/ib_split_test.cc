// SPDX-License-Identifier: Apache-2.0
// How a connection with several queue pairs (SIEVE_IB_QPS) spreads messages over them, against a
// fake that delivers one queue pair's writes while another's are held: queue pairs are independent
// streams, so nothing may depend on their order except what the immediates say.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "net/ib/ib_comm.h"
#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"

namespace sieve::net {
namespace {

using namespace ib_test;

constexpr size_t kLine = 128;  // an LL128 line: 120 bytes of data, then an 8-byte flag
constexpr size_t kFlagOffset = 120;
constexpr auto kCap = std::chrono::seconds(10);

// LL128-shaped data: every byte nonzero (so a landed byte is told from the zeroed receive), each
// line's last 8 bytes its flag.
std::vector<unsigned char> ll128_lines(size_t size) {
  std::vector<unsigned char> v = pattern(size, 77);
  for (unsigned char& b : v) b |= 1;
  return v;
}

// Tests each request not yet done once; true when `until` holds. Requests finished are marked.
struct Progress {
  std::vector<Request*> requests;
  std::vector<bool> done;
  explicit Progress(std::vector<Request*> r) : requests(std::move(r)), done(requests.size(), false) {}
  Status step() {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      Completion c;
      Status st = requests[i]->test(&c);
      if (!st.ok()) return st;
      done[i] = c.done;
    }
    return ok_status();
  }
};

// NCCL's LL128 protocol reads a line as soon as its flag is there. A message cut across queue
// pairs on anything but a 128-byte boundary puts one line's data on one queue pair and its flag
// on another: when the second is faster, the flag lands before the data (NCCL cuts on 128 bytes).
TEST_F(IbTransportTest, SplitsAcrossQueuePairsNeverLandALinesFlagBeforeItsData) {
  ASSERT_NO_FATAL_FAILURE(connect(3));
  const size_t capacity = 3 * ib::kSplitBytesPerQp, size = 300000;  // 3 queue pairs, 100000 bytes each
  std::vector<unsigned char> out = ll128_lines(size), in(capacity, 0);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  fake::hold_writes(in.data(), true);  // the queue pair carrying the first part stalls
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), capacity, &r).ok() && r);
  ASSERT_TRUE(pair_.send->isend(out.data(), size, &s).ok() && s);
  Progress both({s, r});
  // The second and third parts land (each in order within its write): wait for a byte near the
  // end of each, past where either way of cutting puts their starts.
  const auto give_up = std::chrono::steady_clock::now() + kCap;
  while (!(in[200000] && in[size - 1]) && std::chrono::steady_clock::now() < give_up) {
    Status st = both.step();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  ASSERT_TRUE(in[200000] && in[size - 1]) << "the queue pairs not held delivered nothing";
  EXPECT_FALSE(both.done[1]) << "the receive completed with a part still held";
  int torn = 0;
  for (size_t line = 0; line + kLine <= size; line += kLine) {
    const bool flag = std::memcmp(&in[line + kFlagOffset], &out[line + kFlagOffset], kLine - kFlagOffset) == 0;
    if (flag && std::memcmp(&in[line], &out[line], kFlagOffset) != 0) ++torn;
  }
  EXPECT_EQ(torn, 0) << "lines whose flag landed before their data";
  fake::hold_writes(in.data(), false);
  while (!(both.done[0] && both.done[1]) && std::chrono::steady_clock::now() < give_up + kCap) {
    Status st = both.step();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  ASSERT_TRUE(both.done[0] && both.done[1]);
  EXPECT_TRUE(same_bytes(in.data(), out.data(), size));
}

// Small messages take one queue pair each; as in NCCL, each message takes the next one, so one
// stalled queue pair holds up only its own messages, and small traffic uses every queue pair.
TEST_F(IbTransportTest, SmallMessagesRotateOverTheQueuePairs) {
  ASSERT_NO_FATAL_FAILURE(connect(4));
  constexpr int kMessages = 4;
  std::vector<std::vector<unsigned char>> out, in;
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  for (int i = 0; i < kMessages; ++i) {
    out.push_back(pattern(4096, 90 + i));
    in.emplace_back(4096, 0);
    regions.push_back(reg_send(out[i].data(), out[i].size()));
    regions.push_back(reg_recv(in[i].data(), in[i].size()));
  }
  fake::hold_writes(in[0].data(), true);  // the first message's queue pair stalls
  std::vector<Request*> recvs, sends;
  for (int i = 0; i < kMessages; ++i) {
    Request* r = nullptr;
    ASSERT_TRUE(pair_.recv->irecv(in[i].data(), in[i].size(), &r).ok() && r);
    recvs.push_back(r);
  }
  for (int i = 0; i < kMessages; ++i) {
    Request* s = nullptr;
    ASSERT_TRUE(pair_.send->isend(out[i].data(), out[i].size(), &s).ok() && s);
    sends.push_back(s);
  }
  std::vector<Request*> all = sends;
  all.insert(all.end(), recvs.begin(), recvs.end());
  Progress progress(all);
  auto later_done = [&] {
    for (int i = 1; i < kMessages; ++i)
      if (!progress.done[kMessages + i]) return false;
    return true;
  };
  auto give_up = std::chrono::steady_clock::now() + kCap;
  while (!later_done() && std::chrono::steady_clock::now() < give_up) {
    Status st = progress.step();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  EXPECT_TRUE(later_done()) << "messages behind the stalled one waited on its queue pair";
  EXPECT_FALSE(progress.done[kMessages]) << "the held message completed";
  fake::hold_writes(in[0].data(), false);
  give_up = std::chrono::steady_clock::now() + kCap;
  while (std::count(progress.done.begin(), progress.done.end(), true) < 2 * kMessages &&
         std::chrono::steady_clock::now() < give_up) {
    Status st = progress.step();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  for (int i = 0; i < kMessages; ++i) EXPECT_TRUE(same_bytes(in[i].data(), out[i].data(), 4096)) << "message " << i;
}

// A refused message (a send larger than its receive) still takes its queue pairs on both sides,
// so the rotation stays in step and the messages after it arrive intact, on every queue pair.
TEST_F(IbTransportTest, TheRotationStaysInStepAcrossARefusedMessage) {
  ASSERT_NO_FATAL_FAILURE(connect(3));
  roundtrip(1000, 4096, 1);  // queue pair 0
  std::vector<unsigned char> out = pattern(8192, 2), in(4096, kCanary);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok() && r);  // queue pair 1
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok() && s);
  Completion cs, cr;
  EXPECT_EQ(testing::wait(s, &cs).code(), Code::kInvalidUsage);
  EXPECT_EQ(testing::wait(r, &cr).code(), Code::kInvalidUsage);
  for (uint32_t i = 0; i < 4; ++i) roundtrip(3000 + i, 4096, 3 + i);  // queue pairs 2, 0, 1, 2
  roundtrip(300000, 3 * ib::kSplitBytesPerQp, 9);                     // all three, from queue pair 0
  roundtrip(64, 64, 10);
}

}  // namespace
}  // namespace sieve::net
