// SPDX-License-Identifier: Apache-2.0
// Which GID a verbs connection uses on hosts with several addresses, InfiniBand beside RoCE, and a
// GID table that changes under the job: over the fake libibverbs, whose RoCE ports with `ipv6` list
// a link-local RoCE v1, an IPv4-mapped RoCE v2 and a global IPv6 RoCE v2 GID (indices 0, 1, 2).
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

// The source GID index of every connected queue pair (RoCE: all of them carry a GRH).
std::vector<int> sgid_indices() {
  std::vector<int> out;
  for (const ibv_qp_attr& qp : fake::connected_qps()) out.push_back(qp.ah_attr.grh.sgid_index);
  return out;
}

// SIEVE_IB_GID_INDEX (or NCCL_IB_GID_INDEX) picks a RoCE address; an InfiniBand port of the same
// host has one GID and must keep it, not fail the whole transport.
TEST_F(IbTransportTest, GidIndexForRoceLeavesTheInfinibandPortsOfTheHostUsable) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "rx0:roce:lo:100:ipv6;ix0:ib::200");
  TransportOptions roce = on_ports("=rx0"), ib = on_ports("=ix0");
  roce.ib_gid_index = ib.ib_gid_index = 2;
  ASSERT_NO_FATAL_FAILURE(connect(ib, ib));
  roundtrip(70000, 70000, 1);
  pair_ = testing::Pair{};
  transport_.reset();
  connector_transport_.reset();
  ASSERT_NO_FATAL_FAILURE(connect(roce, roce));
  roundtrip(70000, 70000, 2);
  for (int index : sgid_indices()) EXPECT_EQ(index, 2);
}

TEST_F(IbTransportTest, AnIpv6AddressFamilyTakesTheGlobalIpv6Gid) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "r6:roce:lo:100:ipv6");
  TransportOptions o = ib_options();
  o.ib_addr_family = Family::kIPv6;
  ASSERT_NO_FATAL_FAILURE(connect(o));
  roundtrip(70000, 70000, 3);
  const auto indices = sgid_indices();
  ASSERT_FALSE(indices.empty());
  for (int index : indices) EXPECT_EQ(index, 2);
}

TEST_F(IbTransportTest, AnAddressRangeChoosesAmongTheAddresses) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "rr:roce:lo:100:ipv6");
  TransportOptions o = ib_options();
  o.ib_addr_range = "fd66:7600::/32";
  ASSERT_NO_FATAL_FAILURE(connect(o));
  for (int index : sgid_indices()) EXPECT_EQ(index, 2);
  pair_ = testing::Pair{};
  transport_.reset();
  o.ib_addr_range = "10.0.0.0/8";
  ASSERT_NO_FATAL_FAILURE(connect(o));
  for (int index : sgid_indices()) EXPECT_EQ(index, 1);
}

TEST_F(IbTransportTest, AnAddressRangeNoGidIsInIsAnErrorNamingIt) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "rn:roce:lo:100:ipv6");
  TransportOptions o = ib_options();
  o.ib_addr_range = "192.168.0.0/16";
  Status st = Transport::create_ib(o, &transport_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("192.168.0.0/16"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NCCL_IB_ADDR_RANGE"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rn:1"), std::string::npos) << st.message();
  o.ib_addr_range = "10.0.0.0";
  st = Transport::create_ib(o, &transport_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/length"), std::string::npos) << st.message();
}

// The IPv4 address leaves the netdev after the transport started: its GID entry empties (and the
// kernel raises IBV_EVENT_GID_CHANGE). A connection made now must use the port's current GID; the
// one discovery saw is refused at RTR.
TEST_F(IbTransportTest, AConnectionAfterAGidChangeUsesThePortsCurrentGid) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "gc:roce:lo:100:ipv6");
  ASSERT_TRUE(Transport::create_ib(ib_options(), &transport_).ok());
  violations_before_ = fake::violations();
  ASSERT_TRUE(fake::set_gid("gc", 1, 1, nullptr, IBV_GID_TYPE_ROCE_V2));
  Status st = testing::connect_pair(*transport_, *transport_, &pair_);
  ASSERT_TRUE(st.ok()) << st.message();
  roundtrip(70000, 70000, 4);
  const auto indices = sgid_indices();
  ASSERT_FALSE(indices.empty());
  for (int index : indices) EXPECT_EQ(index, 2);
}

}  // namespace
}  // namespace sieve::net
