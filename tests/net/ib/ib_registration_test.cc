// SPDX-License-Identifier: Apache-2.0
// Registration at scale: NCCL registers a buffer on every comm that moves it (one per peer, and
// ncclCommRegister's first one on a loopback comm). The verbs transport pins it once per device,
// reference-counted, and any comm of the device finds any of its registrations (regIsGlobal=1).
#include <gtest/gtest.h>

#include <vector>

#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"

namespace sieve::net {
namespace {

using namespace ib_test;

std::unique_ptr<MemoryRegion> reg(SendComm& comm, void* data, size_t size) {
  std::unique_ptr<MemoryRegion> r;
  Status st = comm.register_memory({data, size, -1, 0}, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

std::unique_ptr<MemoryRegion> reg(RecvComm& comm, void* data, size_t size) {
  std::unique_ptr<MemoryRegion> r;
  Status st = comm.register_memory({data, size, -1, 0}, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

TEST_F(IbTransportTest, ABufferRegisteredOnEveryCommOfADeviceIsPinnedOnce) {
  ASSERT_NO_FATAL_FAILURE(connect());
  testing::Pair second;
  ASSERT_TRUE(testing::connect_pair(*transport_, *transport_, &second).ok());
  std::vector<unsigned char> buffer(1 << 20, 1);
  const int before = fake::live_mrs();
  auto a = reg(*pair_.send, buffer.data(), buffer.size());
  auto b = reg(*pair_.recv, buffer.data(), buffer.size());
  auto c = reg(*second.send, buffer.data(), buffer.size());
  auto d = reg(*second.recv, buffer.data(), buffer.size());
  EXPECT_EQ(fake::live_mrs(), before + 1) << "one memory registration for four comms of one device";
  // NCCL's per-operation registration of part of a registered buffer: nearly immediate, no new pin.
  auto part = reg(*second.send, buffer.data() + 8192, 4096);
  EXPECT_EQ(fake::live_mrs(), before + 1);
  a.reset();
  b.reset();
  c.reset();
  part.reset();
  EXPECT_NE(fake::mr_access(buffer.data()), -1) << "still registered for the comm that holds it";
  d.reset();
  EXPECT_EQ(fake::mr_access(buffer.data()), -1) << "the last deregistration unpins";
  EXPECT_EQ(fake::live_mrs(), before);
  second = testing::Pair{};
}

TEST_F(IbTransportTest, ALargerRegistrationOverASmallerOnePinsItsOwnPages) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> buffer(1 << 20, 1);
  const int before = fake::live_mrs();
  auto small = reg(*pair_.send, buffer.data(), 4096);
  auto large = reg(*pair_.recv, buffer.data(), buffer.size());
  EXPECT_EQ(fake::live_mrs(), before + 2);
  small.reset();
  EXPECT_EQ(fake::live_mrs(), before + 1);
  large.reset();
  EXPECT_EQ(fake::live_mrs(), before);
}

// regIsGlobal: a registration made on one comm (ncclCommRegister's, on another peer's comm) serves
// the isend and irecv of any comm of the same device, and outlives the comm it was made on.
TEST_F(IbTransportTest, ARegistrationOnOneCommServesEveryCommOfTheDevice) {
  ASSERT_NO_FATAL_FAILURE(connect());
  testing::Pair second;
  ASSERT_TRUE(testing::connect_pair(*transport_, *transport_, &second).ok());
  const size_t size = 300000;
  std::vector<unsigned char> out = pattern(size, 7);
  std::vector<unsigned char> in(size, kCanary);
  auto send_region = reg(*pair_.send, out.data(), out.size());
  auto recv_region = reg(*pair_.recv, in.data(), in.size());
  pair_ = testing::Pair{};  // the comms they were registered on are gone
  Request *r = nullptr, *s = nullptr;
  Status st = second.recv->irecv(in.data(), size, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  st = second.send->isend(out.data(), size, &s);
  ASSERT_TRUE(st.ok()) << st.message();
  Completion cr, cs;
  st = testing::wait_both(s, &cs, r, &cr, std::chrono::seconds(60));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cr.size, size);
  EXPECT_TRUE(same_bytes(in.data(), out.data(), size));
  second = testing::Pair{};
}

}  // namespace
}  // namespace sieve::net
