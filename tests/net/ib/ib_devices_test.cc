// Port selection (SIEVE_IB_HCA) and RoCE GID choice: pure functions over discovered ports.
#include "net/ib/ib_devices.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace sieve::net::ib {
namespace {

IbPort port(const std::string& device, int number, bool active = true) {
  IbPort p;
  p.device = device;
  p.port = number;
  p.active = active;
  p.link_layer = LinkLayer::Ethernet;
  return p;
}

GidEntry gid(int index, GidType type, const char* address) {
  GidEntry e;
  e.index = index;
  e.type = type;
  EXPECT_EQ(inet_pton(AF_INET6, address, e.gid.raw), 1) << address;
  return e;
}

std::vector<std::string> names(const std::vector<IbPort>& ports) {
  std::vector<std::string> out;
  for (const IbPort& p : ports) out.push_back(p.name());
  return out;
}

const std::vector<IbPort> kPorts = {port("mlx5_0", 1), port("mlx5_0", 2), port("mlx5_1", 1), port("mlx5_10", 1),
                                    port("mlx5_2", 1, /*active=*/false)};

std::vector<std::string> selected(const std::string& text) {
  HcaSpec spec;
  Status st = parse_hca_spec(text, &spec);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return names(select_ports(kPorts, spec));
}

TEST(HcaSpec, EmptySelectsEveryActivePort) {
  EXPECT_EQ(selected(""), (std::vector<std::string>{"mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1"}));
}

TEST(HcaSpec, NamesArePrefixesUnlessExact) {
  EXPECT_EQ(selected("mlx5_1"), (std::vector<std::string>{"mlx5_1:1", "mlx5_10:1"}));
  EXPECT_EQ(selected("=mlx5_1"), (std::vector<std::string>{"mlx5_1:1"}));
}

TEST(HcaSpec, PortNarrowsToOnePort) {
  EXPECT_EQ(selected("mlx5_0:2, =mlx5_1"), (std::vector<std::string>{"mlx5_0:2"}));  // '=' only leads
  EXPECT_EQ(selected("=mlx5_0:2,mlx5_1"), (std::vector<std::string>{"mlx5_0:2", "mlx5_1:1"}));
}

TEST(HcaSpec, CaretExcludes) {
  EXPECT_EQ(selected("^mlx5_0"), (std::vector<std::string>{"mlx5_1:1", "mlx5_10:1"}));
  EXPECT_EQ(selected("^=mlx5_1,mlx5_0:1"), (std::vector<std::string>{"mlx5_0:2", "mlx5_10:1"}));
}

TEST(HcaSpec, InactivePortsAreNeverSelected) { EXPECT_TRUE(selected("mlx5_2").empty()); }

TEST(HcaSpec, BadEntriesAreErrorsNamingThem) {
  HcaSpec spec;
  for (const char* bad : {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", ":1", "^", "="}) {
    Status st = parse_hca_spec(bad, &spec);
    EXPECT_EQ(st.code(), Code::InvalidArgument) << bad;
    EXPECT_NE(st.message().find("SIEVE_IB_HCA"), std::string::npos) << st.message();
  }
}

TEST(ChooseGid, RoceV2Ipv4MappedWinsThenGlobalV2ThenV1) {
  IbPort p = port("mlx5_0", 1);
  p.gids = {gid(0, GidType::RoCEv1, "fe80::1"), gid(1, GidType::RoCEv2, "fe80::1"),
            gid(2, GidType::RoCEv2, "2001:db8::5"), gid(3, GidType::RoCEv2, "::ffff:10.0.0.5")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, -1, &index).is_ok());
  EXPECT_EQ(index, 3);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).is_ok());
  EXPECT_EQ(index, 2);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).is_ok());
  EXPECT_EQ(index, 1);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).is_ok());
  EXPECT_EQ(index, 0);
}

TEST(ChooseGid, ConfiguredIndexWinsWhenPopulatedAndIsAnErrorOtherwise) {
  IbPort p = port("mlx5_0", 1);
  p.gids = {gid(0, GidType::RoCEv1, "fe80::1"), gid(3, GidType::RoCEv2, "::ffff:10.0.0.5")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, 0, &index).is_ok());
  EXPECT_EQ(index, 0);
  Status st = choose_gid(p, 2, &index);
  EXPECT_EQ(st.code(), Code::InvalidArgument);
  EXPECT_NE(st.message().find("SIEVE_IB_GID_INDEX=2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("mlx5_0:1"), std::string::npos) << st.message();
}

TEST(ChooseGid, RocePortWithoutGidsIsAnError) {
  int index = -1;
  Status st = choose_gid(port("mlx5_0", 1), -1, &index);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("mlx5_0:1"), std::string::npos) << st.message();
}

TEST(ChooseGid, InfinibandUsesIndexZero) {
  IbPort p = port("mlx5_0", 1);
  p.link_layer = LinkLayer::InfiniBand;
  p.gids = {gid(0, GidType::IB, "fe80::1")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, -1, &index).is_ok());
  EXPECT_EQ(index, 0);
}

}  // namespace
}  // namespace sieve::net::ib
