// SPDX-License-Identifier: Apache-2.0
// Port selection (SIEVE_IB_HCA) and RoCE GID choice: pure functions over discovered ports.
#include "net/ib/ib_devices.h"
#include "net/ib/ib_gid.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace sieve::net::ib {
namespace {

IbPort port(const std::string& device, int number, bool active = true) {
  IbPort p;
  p.device = device;
  p.port = number;
  p.active = active;
  p.link_layer = LinkLayer::kEthernet;
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
  EXPECT_TRUE(st.ok()) << st.message();
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
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("SIEVE_IB_HCA"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("NCCL_IB_HCA"), std::string::npos) << st.message() << ": it may have come from there";
  }
}

TEST(ChooseGid, RoceV2Ipv4MappedWinsThenGlobalV2ThenV1) {
  IbPort p = port("mlx5_0", 1);
  p.gids = {gid(0, GidType::kRoCEv1, "fe80::1"), gid(1, GidType::kRoCEv2, "fe80::1"),
            gid(2, GidType::kRoCEv2, "2001:db8::5"), gid(3, GidType::kRoCEv2, "::ffff:10.0.0.5")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  EXPECT_EQ(index, 3);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  EXPECT_EQ(index, 2);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  EXPECT_EQ(index, 1);
  p.gids.pop_back();
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  EXPECT_EQ(index, 0);
}

TEST(ChooseGid, ConfiguredIndexWinsWhenPopulatedAndIsAnErrorOtherwise) {
  IbPort p = port("mlx5_0", 1);
  p.gids = {gid(0, GidType::kRoCEv1, "fe80::1"), gid(3, GidType::kRoCEv2, "::ffff:10.0.0.5")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, 0, &index).ok());
  EXPECT_EQ(index, 0);
  Status st = choose_gid(p, 2, &index);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("GID index 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("SIEVE_IB_GID_INDEX"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("mlx5_0:1"), std::string::npos) << st.message();
}

TEST(ChooseGid, RocePortWithoutGidsIsAnError) {
  int index = -1;
  Status st = choose_gid(port("mlx5_0", 1), -1, &index);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mlx5_0:1"), std::string::npos) << st.message();
}

TEST(ChooseGid, InfinibandUsesIndexZero) {
  IbPort p = port("mlx5_0", 1);
  p.link_layer = LinkLayer::kInfiniBand;
  p.gids = {gid(0, GidType::kIB, "fe80::1")};
  int index = -1;
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  EXPECT_EQ(index, 0);
}

// A host with RoCE and InfiniBand ports sets a GID index for its RoCE ports; its IB ports keep their
// port GID (index 0) instead of failing the transport.
TEST(ChooseGid, ConfiguredIndexDoesNotApplyToInfinibandPorts) {
  IbPort p = port("mlx5_1", 1);
  p.link_layer = LinkLayer::kInfiniBand;
  p.gids = {gid(0, GidType::kIB, "fe80::1")};
  int index = -1;
  Status st = choose_gid(p, 3, &index);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(index, 0);
}

// A dual-stack RoCE netdev as mlx5 lists it: v1 and v2 of link-local, IPv4 and global IPv6.
IbPort dual_stack() {
  IbPort p = port("mlx5_0", 1);
  p.gids = {gid(0, GidType::kRoCEv1, "fe80::1"),           gid(1, GidType::kRoCEv2, "fe80::1"),
            gid(2, GidType::kRoCEv1, "::ffff:10.1.0.5"),   gid(3, GidType::kRoCEv2, "::ffff:10.1.0.5"),
            gid(4, GidType::kRoCEv1, "fd00:1::5"),         gid(5, GidType::kRoCEv2, "fd00:1::5"),
            gid(6, GidType::kRoCEv2, "::ffff:192.168.3.7")};
  return p;
}

int selected(const IbPort& p, Family family, const std::string& range) {
  GidPolicy policy;
  policy.family = family;
  Status st = parse_address_range(range, "SIEVE_IB_ADDR_RANGE", &policy.range);
  EXPECT_TRUE(st.ok()) << st.message();
  int index = -1;
  st = select_gid(p, policy, &index);
  return st.ok() ? index : -1;
}

TEST(SelectGid, AddressFamilyAndRangeChooseAmongSeveralAddresses) {
  const IbPort p = dual_stack();
  EXPECT_EQ(selected(p, Family::kAny, ""), 3);   // IPv4-mapped RoCE v2 first
  EXPECT_EQ(selected(p, Family::kIPv4, ""), 3);  // NCCL_IB_ADDR_FAMILY=AF_INET
  EXPECT_EQ(selected(p, Family::kIPv6, ""), 5);  // AF_INET6: global, never link-local
  EXPECT_EQ(selected(p, Family::kAny, "192.168.0.0/16"), 6);
  EXPECT_EQ(selected(p, Family::kIPv4, "10.1.0.0/16"), 3);
  EXPECT_EQ(selected(p, Family::kAny, "fd00::/8"), 5);
  EXPECT_EQ(selected(p, Family::kAny, "fd00:2::/32"), -1);
  EXPECT_EQ(selected(p, Family::kAny, "10.2.0.0/16"), -1);
  EXPECT_EQ(selected(p, Family::kIPv6, "10.1.0.0/16"), -1);  // a range of the other family matches nothing
}

TEST(SelectGid, NothingInTheRangeIsAnErrorListingTheTable) {
  GidPolicy policy;
  ASSERT_TRUE(parse_address_range("172.16.0.0/12", "NCCL_IB_ADDR_RANGE", &policy.range).ok());
  int index = -1;
  Status st = select_gid(dual_stack(), policy, &index);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("172.16.0.0/12"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NCCL_IB_ADDR_RANGE"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("::ffff:192.168.3.7"), std::string::npos) << st.message();
}

TEST(AddressRange, BadRangesAreErrorsNamingTheVariable) {
  AddressRange range;
  for (const char* bad : {"10.0.0.0", "10.0.0.0/33", "fd00::/129", "10.0.0/8", "fd00::/x", "/8", "host/8"}) {
    Status st = parse_address_range(bad, "NCCL_IB_ADDR_RANGE", &range);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("NCCL_IB_ADDR_RANGE"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(parse_address_range("10.0.0.0/0", "X", &range).ok());
  ibv_gid any{};
  ASSERT_EQ(inet_pton(AF_INET6, "::ffff:1.2.3.4", any.raw), 1);
  EXPECT_TRUE(in_range(range, any));
  ASSERT_EQ(inet_pton(AF_INET6, "fd00::1", any.raw), 1);
  EXPECT_FALSE(in_range(range, any)) << "an IPv4 range holds IPv4-mapped GIDs only";
}

}  // namespace
}  // namespace sieve::net::ib
