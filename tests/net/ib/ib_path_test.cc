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

}  // namespace
}  // namespace sieve::net
