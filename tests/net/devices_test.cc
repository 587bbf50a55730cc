// SPDX-License-Identifier: Apache-2.0
// Interface selection with NCCL's SIEVE_SOCKET_IFNAME syntax, from synthetic interface lists.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "net/devices.h"
#include "net/transport.h"
#include "topology/discover.h"

namespace sieve::net {
namespace {

InterfaceAddress v4(const std::string& name, const char* addr, bool loopback = false, bool up = true) {
  InterfaceAddress a;
  a.name = name;
  a.up = up;
  a.loopback = loopback;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  inet_pton(AF_INET, addr, &in.sin_addr);
  std::memcpy(&a.address.storage, &in, sizeof(in));
  a.address.length = sizeof(in);
  return a;
}

InterfaceAddress v6(const std::string& name, const char* addr, bool loopback = false) {
  InterfaceAddress a;
  a.name = name;
  a.up = true;
  a.loopback = loopback;
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, addr, &in6.sin6_addr);
  std::memcpy(&a.address.storage, &in6, sizeof(in6));
  a.address.length = sizeof(in6);
  return a;
}

std::vector<std::string> names(const std::vector<Device>& devices) {
  std::vector<std::string> n;
  for (const auto& d : devices) n.push_back(d.name);
  return n;
}

const std::vector<InterfaceAddress> kHost = {v4("lo", "127.0.0.1", true), v6("lo", "::1", true),
                                             v4("eth0", "10.0.0.2"),      v6("eth0", "fe80::1"),
                                             v6("eth0", "fd00::2"),       v4("docker0", "172.17.0.1"),
                                             v4("br-1a2b", "172.18.0.1"), v4("ib0", "192.168.1.2"),
                                             v6("eth1", "fe80::5"),       v4("eth2", "10.9.9.9", false, false)};

using V = std::vector<std::string>;

TEST(IfnameSpec, Parses) {
  IfnameSpec s = parse_ifname_spec("^docker,lo");
  EXPECT_TRUE(s.exclude);
  EXPECT_FALSE(s.exact);
  EXPECT_EQ(s.names, (V{"docker", "lo"}));
  s = parse_ifname_spec("=eth0, eth1");
  EXPECT_TRUE(s.exact);
  EXPECT_EQ(s.names, (V{"eth0", "eth1"}));
  s = parse_ifname_spec("^=eth0");
  EXPECT_TRUE(s.exclude && s.exact);
  EXPECT_TRUE(parse_ifname_spec("").names.empty());
}

TEST(IfnameSpec, Matches) {
  EXPECT_TRUE(ifname_matches(parse_ifname_spec("eth"), "eth10"));
  EXPECT_FALSE(ifname_matches(parse_ifname_spec("=eth1"), "eth10"));
  EXPECT_TRUE(ifname_matches(parse_ifname_spec("=eth1"), "eth1"));
  EXPECT_FALSE(ifname_matches(parse_ifname_spec("^eth"), "eth0"));
  EXPECT_TRUE(ifname_matches(parse_ifname_spec("^eth"), "ib0"));
  EXPECT_TRUE(ifname_matches(parse_ifname_spec("^=eth"), "eth0"));
}

TEST(SelectDevices, DefaultSkipsLoopbackBridgesAndDownInterfaces) {
  auto d = select_devices(kHost, {});
  EXPECT_EQ(names(d), (V{"eth0", "ib0", "eth1"}));
  EXPECT_EQ(d[0].address.text(), "10.0.0.2");  // IPv4 preferred
  EXPECT_EQ(d[2].address.text(), "fe80::5");   // link-local only when nothing better
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].guid, i);
}

TEST(SelectDevices, FallsBackToLoopbackWhenNothingElse) {
  std::vector<InterfaceAddress> only_lo = {v4("lo", "127.0.0.1", true), v4("docker0", "172.17.0.1")};
  EXPECT_EQ(names(select_devices(only_lo, {})), (V{"docker0", "lo"}));
}

TEST(SelectDevices, FamilyFilter) {
  auto d = select_devices(kHost, {"", Family::kIPv6});
  EXPECT_EQ(names(d), (V{"eth0", "eth1"}));
  EXPECT_EQ(d[0].address.text(), "fd00::2");  // global before link-local
  EXPECT_EQ(names(select_devices(kHost, {"", Family::kIPv4})), (V{"eth0", "ib0"}));
}

TEST(SelectDevices, IfnameSyntax) {
  EXPECT_EQ(names(select_devices(kHost, {"eth", Family::kAny})), (V{"eth0", "eth1"}));
  EXPECT_EQ(names(select_devices(kHost, {"=eth1", Family::kAny})), (V{"eth1"}));
  EXPECT_EQ(names(select_devices(kHost, {"^eth,lo", Family::kAny})), (V{"docker0", "br-1a2b", "ib0"}));
  EXPECT_EQ(names(select_devices(kHost, {"lo", Family::kIPv4})), (V{"lo"}));
  EXPECT_TRUE(select_devices(kHost, {"=eth", Family::kAny}).empty());
  EXPECT_TRUE(select_devices(kHost, {"nomatch", Family::kAny}).empty());
}

TEST(SelectDevices, ContainerBridgeNames) {
  for (const char* n : {"docker0", "br-abc", "virbr0", "lxcbr0", "cni0", "podman1"})
    EXPECT_TRUE(is_container_bridge(n)) << n;
  for (const char* n : {"eth0", "bridge", "veth1", "ens5", "ib0"}) EXPECT_FALSE(is_container_bridge(n)) << n;
}

// Placement comes from topology/: PCI path, speed, card guid, NUMA node and local CPUs of the NIC
// with the device's name; what the topology does not know keeps the defaults.
TEST(PlaceDevices, TakesPlacementFromTheTopology) {
  topology::Machine machine;
  topology::Nic eth;
  eth.name = "eth0";
  eth.pci_bus_id = "0000:17:00.1";
  eth.pci_path = "/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.1";
  eth.speed_mbps = 100000;
  eth.guid = 0x1700;
  eth.numa_node = 1;
  eth.cpus = {8, 9, 10, 11};
  eth.vendor_id = kPciVendorAws;  // picks the cloud stripe shape
  topology::Nic veth;
  veth.name = "veth0";
  veth.is_virtual = true;
  veth.guid = 0xdead;
  machine.nics = {eth, veth};

  std::vector<Device> devices(3);
  devices[0].name = "eth0";
  devices[1].name = "veth0";
  devices[1].guid = 1;
  devices[2].name = "unknown0";
  devices[2].guid = 2;
  place_devices(machine, devices);

  EXPECT_EQ(devices[0].pci_path, eth.pci_path);
  EXPECT_EQ(devices[0].speed_mbps, 100000);
  EXPECT_EQ(devices[0].guid, 0x1700u);
  EXPECT_EQ(devices[0].numa_node, 1);
  EXPECT_EQ(devices[0].cpus, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(devices[0].pci_vendor, kPciVendorAws);
  EXPECT_EQ(devices[1].pci_vendor, 0);
  // A virtual NIC: no PCI path, unknown speed, and its own index as guid (not merged with others).
  EXPECT_TRUE(devices[1].pci_path.empty());
  EXPECT_EQ(devices[1].speed_mbps, Device::kUnknownSpeedMbps);
  EXPECT_EQ(devices[1].guid, 1u);
  EXPECT_EQ(devices[2].numa_node, -1);
  EXPECT_EQ(devices[2].guid, 2u);
}

TEST(Discover, FindsLoopbackWhenAskedFor) {
  std::vector<Device> d;
  const topology::Machine machine = topology::discover({}).machine;
  Status st = discover_devices({"=lo", Family::kIPv4}, machine, &d);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].address.text(), "127.0.0.1");
  EXPECT_TRUE(d[0].pci_path.empty());
  EXPECT_GT(d[0].speed_mbps, 0);
  Status none = discover_devices({"=no-such-interface", Family::kAny}, machine, &d);
  EXPECT_EQ(none.code(), Code::kSystemError);
  EXPECT_NE(none.message().find("SIEVE_SOCKET_IFNAME"), std::string::npos);
}

}  // namespace
}  // namespace sieve::net
