// SPDX-License-Identifier: Apache-2.0
// Port discovery through the dlopen'd verbs table, over the fake libibverbs (LD_LIBRARY_PATH puts it
// first; FAKE_VERBS_DEVICES, read when devices are listed, describes the "hardware").
#include <gtest/gtest.h>
#include <stdlib.h>

#include "net/ib/ib_devices.h"
#include "net/ib/verbs_library.h"

namespace sieve::net::ib {
namespace {

const VerbsLibrary& fake_verbs() {
  const VerbsLibrary* verbs = nullptr;
  Status st = load_verbs(&verbs);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!verbs) std::abort();
  // The real libibverbs is installed on development machines: make sure it is not the one tested.
  EXPECT_NE(verbs->path.find("fake_verbs"), std::string::npos) << verbs->path;
  return *verbs;
}

std::vector<IbPort> discover(const char* devices, std::vector<std::string>* notes) {
  setenv("FAKE_VERBS_DEVICES", devices, 1);
  std::vector<IbPort> ports;
  Status st = discover_ports(fake_verbs(), topology::Machine{}, &ports, notes);
  EXPECT_TRUE(st.ok()) << st.message();
  return ports;
}

std::vector<IbPort> discover(const char* devices) {
  std::vector<std::string> notes;
  std::vector<IbPort> ports = discover(devices, &notes);
  EXPECT_TRUE(notes.empty()) << notes.front();
  return ports;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& line : lines)
    if (line.find(part) != std::string::npos) return true;
  return false;
}

TEST(IbDiscovery, RocePortWithItsGidsSpeedAndNetdev) {
  std::vector<IbPort> ports = discover("mlx5_0:roce:lo:200");
  ASSERT_EQ(ports.size(), 1u);
  const IbPort& p = ports[0];
  EXPECT_EQ(p.name(), "mlx5_0:1");
  EXPECT_EQ(p.link_layer, LinkLayer::kEthernet);
  EXPECT_TRUE(p.active);
  EXPECT_EQ(p.speed_mbps, 200000);
  EXPECT_EQ(p.mtu_bytes, 4096);
  EXPECT_TRUE(p.dmabuf);
  EXPECT_NE(p.guid, 0u);
  EXPECT_GT(p.max_qp, 0);
  ASSERT_GE(p.gids.size(), 2u);
  int index = -1;
  ASSERT_TRUE(choose_gid(p, -1, &index).ok());
  const GidEntry* chosen = nullptr;
  for (const GidEntry& e : p.gids)
    if (e.index == index) chosen = &e;
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->type, GidType::kRoCEv2);
  EXPECT_EQ(chosen->text().rfind("::ffff:", 0), 0u) << chosen->text();
  EXPECT_EQ(chosen->netdev, "lo");
  EXPECT_EQ(p.netdev, "lo");
}

TEST(IbDiscovery, InfinibandPortHasALidAndIbGids) {
  std::vector<IbPort> ports = discover("mlx5_0:roce:lo:100;mlx5_1:ib::100");
  ASSERT_EQ(ports.size(), 2u);
  const IbPort& p = ports[1];
  EXPECT_EQ(p.device, "mlx5_1");
  EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
  EXPECT_NE(p.lid, 0);
  EXPECT_EQ(p.speed_mbps, 100000);
  ASSERT_FALSE(p.gids.empty());
  for (const GidEntry& e : p.gids) EXPECT_EQ(e.type, GidType::kIB);
  EXPECT_TRUE(p.netdev.empty());
  EXPECT_NE(p.guid, ports[0].guid);
}

// An EFA port (link layer and transport unspecified, no RC queue pairs) or an iWARP one (Ethernet,
// but connected only through rdma_cm) would be selected and fail the first connect instead of
// leaving the job to TCP: both are skipped, each with a note saying why.
TEST(IbDiscovery, DevicesWithoutInfinibandOrRoceRcQueuePairsAreSkippedWithANote) {
  std::vector<std::string> notes;
  std::vector<IbPort> ports = discover("efa0:efa::100;iw0:iwarp:lo:100;mlx5_0:roce:lo:100", &notes);
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].name(), "mlx5_0:1");
  EXPECT_TRUE(any_contains(notes, "efa0: transport unspecified")) << ::testing::PrintToString(notes);
  EXPECT_TRUE(any_contains(notes, "iw0: transport iWARP")) << ::testing::PrintToString(notes);
}

TEST(IbDiscovery, NoDevicesIsAnEmptyListNotAnError) { EXPECT_TRUE(discover("").empty()); }

TEST(IbDiscovery, HcaSpecSelectsAmongDiscoveredPorts) {
  std::vector<IbPort> ports = discover("mlx5_0:roce:lo:100;mlx5_1:ib::100");
  HcaSpec spec;
  ASSERT_TRUE(parse_hca_spec("^mlx5_0", &spec).ok());
  std::vector<IbPort> chosen = select_ports(ports, spec);
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen[0].name(), "mlx5_1:1");
}

}  // namespace
}  // namespace sieve::net::ib
