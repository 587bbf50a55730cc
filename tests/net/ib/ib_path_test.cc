// SPDX-License-Identifier: Apache-2.0
// How the verbs transport addresses its peer on real fabrics: global routes where InfiniBand needs
// them, and the path attributes a connection's queue pairs are given.
#include <gtest/gtest.h>

#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"

namespace sieve::net {
namespace {

using namespace ib_test;

TransportOptions on_ports(const std::string& hca) {
  TransportOptions o = ib_options();
  o.ib_hca = hca;
  return o;
}

// SR-IOV virtual functions and cloud InfiniBand ports refuse RTR without a GRH.
TEST_F(IbTransportTest, AnInfinibandPortThatRequiresAGrhConnectsWithOne) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "vf0:ib::200:grh_required");
  ASSERT_NO_FATAL_FAILURE(connect());
  roundtrip(100000, 100000, 1);
  for (const ibv_qp_attr& qp : fake::connected_qps()) EXPECT_EQ(qp.ah_attr.is_global, 1) << "qpn " << qp.dest_qp_num;
}

// Peers behind an IB router: routed by GID, which only a GRH carries.
TEST_F(IbTransportTest, InfinibandPeersInDifferentSubnetsConnectThroughAGrh) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "sa:ib::100;sb:ib::100:subnet=fec0000000000002");
  ASSERT_NO_FATAL_FAILURE(connect(on_ports("=sa"), on_ports("=sb")));
  roundtrip(70000, 70000, 2);
}

TEST_F(IbTransportTest, InfinibandPeersInOneSubnetRouteByLidAlone) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "la:ib::100;lb:ib::100");
  ASSERT_NO_FATAL_FAILURE(connect(on_ports("=la"), on_ports("=lb")));
  roundtrip(70000, 70000, 3);
  const auto qps = fake::connected_qps();
  ASSERT_FALSE(qps.empty());
  for (const ibv_qp_attr& qp : qps) EXPECT_EQ(qp.ah_attr.is_global, 0);
}

// A lossless RoCE fabric carries one DSCP without drops: the connecting side's class (SIEVE_IB_TC,
// SIEVE_IB_SL) goes to the listener in the set-up message, so acknowledgements travel in it too.
TEST_F(IbTransportTest, TheConnectorsTrafficClassAndServiceLevelCarryBothDirections) {
  TransportOptions connector = ib_options(2);
  connector.ib_traffic_class = 106;  // DSCP 26
  connector.ib_service_level = 3;
  ASSERT_NO_FATAL_FAILURE(connect(ib_options(), connector));
  roundtrip(300000, 300000, 4);
  const auto qps = fake::connected_qps();
  ASSERT_EQ(qps.size(), 5u) << "two queue pairs on each side and the receiver's flush queue pair";
  for (const ibv_qp_attr& qp : qps) {
    EXPECT_EQ(qp.ah_attr.grh.traffic_class, 106) << "qpn " << qp.dest_qp_num;
    EXPECT_EQ(qp.ah_attr.sl, 3) << "qpn " << qp.dest_qp_num;
  }
}

// NCCL passes each communicator's ncclConfig_t trafficClass to connect; it serves where Sieve's
// variables (and NCCL_IB_TC / NCCL_IB_SL, which the plugin reads into the same options) are unset,
// for the service level only where it fits in 4 bits, as NCCL's IB transport does.
TEST_F(IbTransportTest, TheCommunicatorsTrafficClassServesWhereNoVariableChoseOne) {
  ASSERT_NO_FATAL_FAILURE(connect(ib_options(), ib_options(), /*traffic_class=*/5));
  for (const ibv_qp_attr& qp : fake::connected_qps()) {
    EXPECT_EQ(qp.ah_attr.grh.traffic_class, 5);
    EXPECT_EQ(qp.ah_attr.sl, 5);
  }
}

TEST_F(IbTransportTest, WithoutAnyChoiceTheClassIsZero) {
  ASSERT_NO_FATAL_FAILURE(connect());
  for (const ibv_qp_attr& qp : fake::connected_qps()) {
    EXPECT_EQ(qp.ah_attr.grh.traffic_class, 0);
    EXPECT_EQ(qp.ah_attr.sl, 0);
  }
}

TEST_F(IbTransportTest, QueuePairsJoinThePartitionSievePkeyNames) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "part0:ib::100:pkey=ffff,pkey=8001,pkey=0001");
  TransportOptions full = ib_options(), limited = ib_options();
  full.ib_pkey_index = 1;
  limited.ib_pkey_index = 2;  // a limited member talks to full members of its partition
  ASSERT_NO_FATAL_FAILURE(connect(full, limited));
  roundtrip(5000, 5000, 5);
  const auto qps = fake::connected_qps();
  ASSERT_EQ(qps.size(), 3u) << "a queue pair on each side and the receiver's flush queue pair";
  int full_members = 0, limited_members = 0;
  for (const ibv_qp_attr& qp : qps) {
    full_members += qp.pkey_index == 1;
    limited_members += qp.pkey_index == 2;
  }
  EXPECT_EQ(full_members, 2) << "the listener's queue pair and its flush queue pair";
  EXPECT_EQ(limited_members, 1) << "the connector's queue pair";
}

// Different partitions never exchange a packet: both sides refuse at set-up, naming the P_Keys and
// the variable, instead of a retry-exceeded error seconds into the first message.
TEST_F(IbTransportTest, PeersInDifferentPartitionsAreRefusedAtSetUpNamingSievePkey) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "part1:ib::100:pkey=ffff,pkey=8001,pkey=8002");
  TransportOptions one = ib_options(), two = ib_options();
  one.ib_pkey_index = 1;
  two.ib_pkey_index = 2;
  const Status st = connect_failure(one, two);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("SIEVE_IB_PKEY"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0x8001"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0x8002"), std::string::npos) << st.message();
}

// NCCL's defaults since 2.x: about 4.3 s per try, 8 tries (the fake runs the same timer while a port
// is down); each side's own settings, as timeouts are a requester's.
TEST_F(IbTransportTest, QueuePairsRetryAsSievesTimeoutAndRetryCountSay) {
  ASSERT_NO_FATAL_FAILURE(connect());
  for (const ibv_qp_attr& qp : fake::connected_qps()) {
    EXPECT_EQ(qp.timeout, 20);
    EXPECT_EQ(qp.retry_cnt, 7);
  }
  pair_ = testing::Pair{};
  TransportOptions impatient = ib_options();
  impatient.ib_timeout = 14;
  impatient.ib_retry_count = 3;
  ASSERT_NO_FATAL_FAILURE(connect(impatient));
  for (const ibv_qp_attr& qp : fake::connected_qps()) {
    EXPECT_EQ(qp.timeout, 14);
    EXPECT_EQ(qp.retry_cnt, 3);
  }
}

// NCCL registers with relaxed ordering wherever ibv_reg_mr_iova2 exists (which Sieve requires):
// GPUDirect write bandwidth on VMs and some AMD and Grace hosts depends on it. SIEVE_IB_RELAXED_ORDERING
// (else NCCL_IB_PCI_RELAXED_ORDERING) turns it off; Sieve's own control buffers never need it.
TEST_F(IbTransportTest, NcclsBuffersAreRegisteredWithRelaxedOrderingUnlessTurnedOff) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> a(8192), b(8192);
  auto send_region = reg_send(a.data(), a.size());
  auto recv_region = reg_recv(b.data(), b.size());
  EXPECT_NE(fake::mr_access(a.data()) & IBV_ACCESS_RELAXED_ORDERING, 0) << fake::mr_access(a.data());
  EXPECT_NE(fake::mr_access(b.data()) & IBV_ACCESS_RELAXED_ORDERING, 0) << fake::mr_access(b.data());
  roundtrip(8000, 8000, 7);
  send_region.reset();
  recv_region.reset();
  pair_ = testing::Pair{};
  TransportOptions strict = ib_options();
  strict.ib_relaxed_ordering = false;
  ASSERT_NO_FATAL_FAILURE(connect(strict));
  send_region = reg_send(a.data(), a.size());
  recv_region = reg_recv(b.data(), b.size());
  EXPECT_EQ(fake::mr_access(a.data()) & IBV_ACCESS_RELAXED_ORDERING, 0);
  EXPECT_EQ(fake::mr_access(b.data()) & IBV_ACCESS_RELAXED_ORDERING, 0);
  EXPECT_NE(fake::mr_access(a.data()) & IBV_ACCESS_REMOTE_WRITE, 0);
}

// How one message of `size` went out: plain RDMA writes and writes with immediate posted for it.
struct WriteShape {
  fake::Posted data, with_immediate;
};

class AdaptiveRoutingTest : public IbTransportTest {
 protected:
  WriteShape writes_of(size_t size, uint32_t seed);
};

WriteShape AdaptiveRoutingTest::writes_of(size_t size, uint32_t seed) {
  const fake::Posted data = fake::posted(IBV_WR_RDMA_WRITE);
  const fake::Posted imm = fake::posted(IBV_WR_RDMA_WRITE_WITH_IMM);
  roundtrip(size, size, seed);
  WriteShape shape;
  shape.data.requests = fake::posted(IBV_WR_RDMA_WRITE).requests - data.requests;
  shape.data.bytes = fake::posted(IBV_WR_RDMA_WRITE).bytes - data.bytes;
  shape.with_immediate.requests = fake::posted(IBV_WR_RDMA_WRITE_WITH_IMM).requests - imm.requests;
  shape.with_immediate.bytes = fake::posted(IBV_WR_RDMA_WRITE_WITH_IMM).bytes - imm.bytes;
  return shape;
}

// InfiniBand switches with adaptive routing spread one message's packets over several paths; NCCL
// then sends each message above 8 KiB as a write and its immediate in a zero-byte write behind it,
// so the receiver never sees a message complete before all of it is placed.
TEST_F(AdaptiveRoutingTest, OnInfinibandMessagesAbove8KiBSendTheirImmediateBehindTheirData) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "ar0:ib::200");
  ASSERT_NO_FATAL_FAILURE(connect(ib_options(2)));
  WriteShape large = writes_of(300000, 8);  // two queue pairs, 150000 bytes each
  EXPECT_EQ(large.data.requests, 2u);
  EXPECT_EQ(large.data.bytes, 300000u);
  EXPECT_EQ(large.with_immediate.requests, 2u);
  EXPECT_EQ(large.with_immediate.bytes, 0u);
  WriteShape small = writes_of(8192, 9);
  EXPECT_EQ(small.data.requests, 0u);
  EXPECT_EQ(small.with_immediate.requests, 1u);
  EXPECT_EQ(small.with_immediate.bytes, 8192u);
}

// The data write is unsignaled: when it fails (here a key the receiver deregistered), its error
// completion fails the comm, and the send ends once the write with the immediate queued behind it
// is flushed, not before (the NIC may still read the buffer) and not never.
TEST_F(AdaptiveRoutingTest, AFailedDataWriteFailsTheSendOnceNothingCanTouchItsBuffer) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "ar2:ib::200");
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> out = pattern(65536, 13);
  std::vector<unsigned char> in(65536, kCanary);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  recv_region.reset();
  const fake::Posted data = fake::posted(IBV_WR_RDMA_WRITE);
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion cs;
  Status st = testing::wait(s, &cs);
  EXPECT_EQ(fake::posted(IBV_WR_RDMA_WRITE).requests, data.requests + 1) << "the data went as a plain write";
  ASSERT_FALSE(st.ok()) << "a write with a deregistered key completed";
  EXPECT_EQ(st.code(), Code::kSystemError) << st.message();
  EXPECT_NE(st.message().find("RDMA write on ar2:1"), std::string::npos) << st.message();
  ++violations_before_;  // the one violation this test provokes on purpose
}

TEST_F(AdaptiveRoutingTest, AdaptiveRoutingIsOffOnRoceUnlessAskedAndCanBeTurnedOffOnInfiniband) {
  ASSERT_NO_FATAL_FAILURE(connect());
  WriteShape roce = writes_of(100000, 10);
  EXPECT_EQ(roce.data.requests, 0u);
  EXPECT_EQ(roce.with_immediate.bytes, 100000u);
  pair_ = testing::Pair{};
  TransportOptions asked = ib_options();
  asked.ib_adaptive_routing = 1;
  ASSERT_NO_FATAL_FAILURE(connect(asked));
  WriteShape roce_asked = writes_of(100000, 11);
  EXPECT_EQ(roce_asked.data.bytes, 100000u);
  EXPECT_EQ(roce_asked.with_immediate.bytes, 0u);
  pair_ = testing::Pair{};
  ScopedEnv devices("FAKE_VERBS_DEVICES", "ar1:ib::200");
  TransportOptions off = ib_options();
  off.ib_adaptive_routing = 0;
  ASSERT_NO_FATAL_FAILURE(connect(off));
  WriteShape ib_off = writes_of(100000, 12);
  EXPECT_EQ(ib_off.data.requests, 0u);
  EXPECT_EQ(ib_off.with_immediate.bytes, 100000u);
}

TEST(IbTransportOptions, OutOfRangeRetrySettingsAreRefusedNamingTheVariable) {
  std::unique_ptr<Transport> t;
  TransportOptions o = ib_options();
  o.ib_timeout = 0;
  Status st = Transport::create_ib(o, &t);
  EXPECT_NE(st.message().find("SIEVE_IB_TIMEOUT"), std::string::npos) << st.message();
  o = ib_options();
  o.ib_retry_count = 8;
  st = Transport::create_ib(o, &t);
  EXPECT_NE(st.message().find("SIEVE_IB_RETRY_CNT"), std::string::npos) << st.message();
}

TEST(IbTransportOptions, APkeyIndexBeyondThePortsTableIsRefusedNamingTheVariable) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "part2:ib::100:pkey=ffff,pkey=8001");
  TransportOptions o = ib_options();
  o.ib_pkey_index = 2;
  std::unique_ptr<Transport> t;
  const Status st = Transport::create_ib(o, &t);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("SIEVE_IB_PKEY"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("part2:1 (2 entries)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sieve::net
