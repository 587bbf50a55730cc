// SPDX-License-Identifier: Apache-2.0
// Classification, NIC choice and CPU lists on hand-built placements (no hwloc involved).
#include <gtest/gtest.h>

#include "topology/machine.h"

namespace sieve::topology {
namespace {

Placement at(std::vector<std::string> upstream, int numa) {
  Placement where;
  where.pci_upstream = std::move(upstream);
  where.pci_bus_id = "0000:99:00.0";
  where.numa_node = numa;
  return where;
}

TEST(Classify, SameSwitchIsPix) {
  EXPECT_EQ(classify(at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, 0),
                     at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, 0)),
            PathClass::kPIX);
}

TEST(Classify, SameDownstreamPortIsPix) {
  auto chain = std::vector<std::string>{"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"};
  EXPECT_EQ(classify(at(chain, 0), at(chain, 0)), PathClass::kPIX);
}

TEST(Classify, CascadedSwitchesArePxb) {
  EXPECT_EQ(
      classify(at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:02.0", "0000:05:00.0", "0000:06:00.0"}, 0),
               at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, 0)),
      PathClass::kPXB);
}

TEST(Classify, DifferentRootPortsOfOneHostBridgeArePhb) {
  EXPECT_EQ(classify(at({"pci0000:30", "0000:30:01.0", "0000:31:00.0", "0000:32:00.0"}, 0),
                     at({"pci0000:30", "0000:30:02.0", "0000:40:00.0", "0000:41:00.0"}, 0)),
            PathClass::kPHB);
}

TEST(Classify, HostBridgesOfOneNumaNodeAreNodeAndAcrossNodesSys) {
  EXPECT_EQ(classify(at({"pci0000:00", "0000:00:01.0"}, 0), at({"pci0000:30", "0000:30:01.0"}, 0)), PathClass::kNODE);
  EXPECT_EQ(classify(at({"pci0000:00", "0000:00:01.0"}, 0), at({"pci0000:80", "0000:80:01.0"}, 1)), PathClass::kSYS);
}

TEST(Classify, WithoutPciOnlyTheNumaNodeCounts) {
  Placement virtual_nic;
  virtual_nic.numa_node = 0;
  EXPECT_EQ(classify(at({"pci0000:00"}, 0), virtual_nic), PathClass::kNODE);
  virtual_nic.numa_node = 1;
  EXPECT_EQ(classify(at({"pci0000:00"}, 0), virtual_nic), PathClass::kSYS);
  virtual_nic.numa_node = -1;
  EXPECT_EQ(classify(at({"pci0000:00"}, 0), virtual_nic), PathClass::kSYS);
}

TEST(BestNic, PrefersCloserThenFasterThenFirstAndSkipsOtherKindsAndVirtual) {
  Machine machine;
  Gpu gpu;
  static_cast<Placement&>(gpu) = at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, 0);
  machine.gpus.push_back(gpu);
  auto nic = [](std::string name, Placement where, int64_t speed, NicKind kind, bool is_virtual) {
    Nic n;
    static_cast<Placement&>(n) = std::move(where);
    n.name = std::move(name);
    n.speed_mbps = speed;
    n.kind = kind;
    n.is_virtual = is_virtual;
    return n;
  };
  machine.nics.push_back(nic("veth0", Placement{}, 100000, NicKind::kNetdev, true));
  machine.nics.push_back(nic("far", at({"pci0000:80"}, 1), 400000, NicKind::kNetdev, false));
  machine.nics.push_back(nic("slow", at({"pci0000:00", "0000:00:02.0"}, 0), 25000, NicKind::kNetdev, false));
  machine.nics.push_back(nic("fast", at({"pci0000:00", "0000:00:03.0"}, 0), 100000, NicKind::kNetdev, false));
  machine.nics.push_back(
      nic("mlx5_0", at({"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, 0), 0, NicKind::kRdma, false));
  EXPECT_EQ(best_nic_for(machine, 0), 3);  // PHB beats SYS, 100G beats 25G, veth only as last resort
  EXPECT_EQ(best_nic_for(machine, 0, NicKind::kRdma), 4);
  EXPECT_EQ(best_nic_for(machine, 1), -1);
  machine.nics.resize(1);
  EXPECT_EQ(best_nic_for(machine, 0), 0);
}

TEST(CpuList, FormatsRangesAndParsesTheSysfsFormat) {
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_text({5, 4, 4}), "4-5");
  EXPECT_EQ(cpu_list_text({}), "");
  std::vector<int> cpus;
  std::string error;
  ASSERT_TRUE(parse_cpu_list("0-2,7,9-10\n", cpus, error));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 7, 9, 10}));
  ASSERT_TRUE(parse_cpu_list("", cpus, error));
  EXPECT_TRUE(cpus.empty());
  EXPECT_FALSE(parse_cpu_list("3-1", cpus, error));
  EXPECT_NE(error.find("3-1"), std::string::npos);
  EXPECT_FALSE(parse_cpu_list("0,x", cpus, error));
}

TEST(CardGuid, EqualForFunctionsOfOneCardOnly) {
  EXPECT_EQ(card_guid("0000:02:00.0", "a"), card_guid("0000:02:00.1", "b"));
  EXPECT_NE(card_guid("0000:02:00.0", "a"), card_guid("0000:03:00.0", "a"));
  EXPECT_NE(card_guid("", "eth0"), card_guid("", "eth1"));
  EXPECT_EQ(card_guid("", "eth0"), card_guid("", "eth0"));
}

}  // namespace
}  // namespace sieve::topology
