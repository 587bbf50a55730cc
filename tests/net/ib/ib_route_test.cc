// SPDX-License-Identifier: Apache-2.0
// Routed InfiniBand (ib_route.h): peers in other subnets are addressed by the FLID their routable
// GID carries, as NCCL addresses them; against a fake whose routers forward FLIDs only.
#include <gtest/gtest.h>

#include "net/ib/ib_route.h"
#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"

namespace sieve::net {
namespace {

using namespace ib_test;

TransportOptions on_hca(const std::string& hca) {
  TransportOptions o = ib_options();
  o.ib_hca = hca;
  return o;
}

// Two subnets joined by FLID routers: a packet addressed to the peer's own LID is for a port of
// this subnet, and no router forwards it (on hardware: retry-exceeded after about 34 s).
TEST_F(IbTransportTest, AcrossSubnetsTheDestinationLidIsThePeersFlid) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "ra:ib::200:flid;rb:ib::200:flid,subnet=fec0000000000002");
  ASSERT_NO_FATAL_FAILURE(connect(on_hca("=ra"), on_hca("=rb")));
  roundtrip(70000, 70000, 1);
  roundtrip(100, 4096, 2);
  int routed = 0;
  for (const ibv_qp_attr& qp : fake::connected_qps()) {
    if (!qp.ah_attr.is_global) continue;  // a receive comm's flush queue pair, connected to itself
    ++routed;
    EXPECT_EQ(qp.ah_attr.grh.sgid_index, ib::kRoutableFlidGidIndex) << "qpn " << qp.dest_qp_num;
    EXPECT_NE(ib::gid_flid(qp.ah_attr.grh.dgid), 0) << "qpn " << qp.dest_qp_num;
    EXPECT_EQ(qp.ah_attr.dlid, ib::gid_flid(qp.ah_attr.grh.dgid)) << "qpn " << qp.dest_qp_num;
  }
  EXPECT_EQ(routed, 2) << "one queue pair each way";
}

// Inside one subnet the FLID is not used: the switches deliver by LID, without a GRH.
TEST_F(IbTransportTest, InsideOneRoutedSubnetPeersRouteByLidAlone) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "sa1:ib::200:flid;sb1:ib::200:flid");
  ASSERT_NO_FATAL_FAILURE(connect(on_hca("=sa1"), on_hca("=sb1")));
  roundtrip(70000, 70000, 3);
  for (const ibv_qp_attr& qp : fake::connected_qps()) EXPECT_EQ(qp.ah_attr.is_global, 0);
}

ibv_gid routable(uint16_t flid, uint16_t subnet) {
  ibv_gid g{};
  g.raw[0] = 0xfe;
  g.raw[1] = 0xc0;
  g.raw[4] = static_cast<uint8_t>(flid >> 8);
  g.raw[5] = static_cast<uint8_t>(flid);
  g.raw[6] = static_cast<uint8_t>(subnet >> 8);
  g.raw[7] = static_cast<uint8_t>(subnet);
  g.raw[15] = 1;
  return g;
}

// NCCL's rule: subnets compared by the low 16 bits of the prefix; across them the FLID, or the
// peer's LID where its GID has no FLID.
TEST(IbRoute, TheDestinationLidIsTheLidInsideASubnetAndTheFlidAcrossSubnets) {
  bool no_flid = true;
  EXPECT_EQ(ib::destination_lid(routable(0x0300, 7), 42, routable(0x0400, 7), &no_flid), 42);
  EXPECT_FALSE(no_flid);
  EXPECT_EQ(ib::destination_lid(routable(0x0300, 7), 42, routable(0x0400, 8), &no_flid), 0x0400);
  EXPECT_FALSE(no_flid);
  EXPECT_EQ(ib::destination_lid(routable(0x0300, 7), 42, routable(0, 8), &no_flid), 42);
  EXPECT_TRUE(no_flid);
}

// NCCL_IB_ROUTABLE_FLID_GID_INDEX's default: GID 1 where it carries a FLID, else GID 0 (the port's
// GID choice takes it: AcrossSubnetsTheDestinationLidIsThePeersFlid checks the queue pairs).
TEST(IbRoute, AnInfinibandPortConnectsFromItsRoutableGidWhereItHasOne) {
  ib::IbPort port;
  port.link_layer = ib::LinkLayer::kInfiniBand;
  ib::GidEntry plain;
  plain.index = 0;
  plain.gid = routable(0, 0);
  port.gids.push_back(plain);
  EXPECT_EQ(ib::routable_gid_index(port), 0);
  ib::GidEntry second = plain;
  second.index = 1;
  port.gids.push_back(second);
  EXPECT_EQ(ib::routable_gid_index(port), 0) << "index 1 without a FLID";
  port.gids.back().gid = routable(0x0500, 0);
  EXPECT_EQ(ib::routable_gid_index(port), 1);
}

}  // namespace
}  // namespace sieve::net
