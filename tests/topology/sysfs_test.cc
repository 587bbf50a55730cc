// SPDX-License-Identifier: Apache-2.0
// The sysfs fallback on a fake /sys tree: a virtio NIC whose device is not itself a PCI function,
// a NIC and its RDMA device behind a PCIe switch on NUMA node 1, and a virtual interface.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "topology/discover.h"
#include "topology/hwloc_reader.h"
#include "topology/sysfs_reader.h"

namespace sieve::topology {
namespace {

namespace fs = std::filesystem;

class FakeSysfs : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sieve_fake_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir("bus/pci");
    dir("bus/virtio");
    write("devices/system/cpu/online", "0-15\n");
    write("devices/system/node/node0/cpulist", "0-7\n");
    write("devices/system/node/node1/cpulist", "8-15\n");
    write("devices/system/node/possible", "0-1\n");  // not a node directory: ignored

    // eth0: virtio-net, a virtio device below PCI function 0000:00:03.0.
    const std::string virtio_pci = "devices/pci0000:00/0000:00:03.0";
    pci_function(virtio_pci, "-1", "0-1", "0x1af4", "0x1041");
    link(virtio_pci + "/virtio2/subsystem", "../../../../bus/virtio");
    net_device(virtio_pci + "/virtio2", "eth0", "02:fc:00:00:00:01", "-1", "../../../virtio2");

    // ens5 + mlx5_2: behind root port 80:01.0 and a switch (81:00.0 upstream, 82:02.0 downstream).
    std::string path = "devices/pci0000:80";
    for (const char* hop : {"0000:80:01.0", "0000:81:00.0", "0000:82:02.0"}) {
      path += std::string("/") + hop;
      pci_function(path, "1", "8-15", "0x8086", "0x352a");
    }
    const std::string nic = path + "/0000:85:00.0";
    pci_function(nic, "1", "8-15", "0x15b3", "0x1021");
    net_device(nic, "ens5", "b8:3f:d2:10:0a:20", "100000", "../../../0000:85:00.0");
    dir(nic + "/infiniband/mlx5_2/ports/1");
    write(nic + "/infiniband/mlx5_2/ports/1/rate", "200 Gb/sec (4X HDR)\n");
    write(nic + "/infiniband/mlx5_2/node_guid", "b83f:d203:0010:0a20\n");
    link(nic + "/infiniband/mlx5_2/device", "../../../0000:85:00.0");
    link("class/infiniband/mlx5_2", "../../" + nic + "/infiniband/mlx5_2");

    // veth0: virtual, no device link; speed readable.
    dir("devices/virtual/net/veth0");
    write("devices/virtual/net/veth0/address", "aa:bb:cc:dd:ee:ff\n");
    write("devices/virtual/net/veth0/speed", "10000\n");
    link("class/net/veth0", "../../devices/virtual/net/veth0");
  }
  void TearDown() override { fs::remove_all(root_); }

  void dir(const std::string& relative) { fs::create_directories(root_ + "/" + relative); }
  void write(const std::string& relative, const std::string& text) {
    dir(fs::path(relative).parent_path().string());
    std::ofstream(root_ + "/" + relative) << text;
  }
  void link(const std::string& relative, const std::string& target) {
    dir(fs::path(relative).parent_path().string());
    fs::create_symlink(target, root_ + "/" + relative);
  }
  void pci_function(const std::string& path, const char* numa, const char* cpus, const char* vendor,
                    const char* device) {
    dir(path);
    const size_t depth = static_cast<size_t>(std::count(path.begin(), path.end(), '/')) + 1;
    std::string up;
    for (size_t i = 0; i < depth; ++i) up += "../";
    link(path + "/subsystem", up + "bus/pci");
    write(path + "/numa_node", std::string(numa) + "\n");
    write(path + "/local_cpulist", std::string(cpus) + "\n");
    write(path + "/vendor", std::string(vendor) + "\n");
    write(path + "/device", std::string(device) + "\n");
    write(path + "/class", "0x020000\n");
  }
  void net_device(const std::string& parent, const std::string& name, const char* address, const char* speed,
                  const std::string& device_link) {
    const std::string path = parent + "/net/" + name;
    write(path + "/address", std::string(address) + "\n");
    write(path + "/speed", std::string(speed) + "\n");
    link(path + "/device", device_link);
    link("class/net/" + name, "../../" + path);
  }

  Discovery discover_fake() {
    Options options;
    options.sysfs_root = root_;
    options.use_hwloc = false;
    options.query_cuda = false;
    return discover(options);
  }

  std::string root_;
};

TEST_F(FakeSysfs, ListsEveryInterfaceAndRdmaDevice) {
  Discovery found = discover_fake();
  ASSERT_TRUE(found.ok);
  const Machine& machine = found.machine;
  EXPECT_EQ(machine.source, Source::kSysfs);
  std::vector<std::string> names;
  for (const auto& nic : machine.nics) names.push_back(nic.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ens5", "eth0", "veth0", "mlx5_2"}));
  ASSERT_EQ(machine.numa_nodes.size(), 2u);
  EXPECT_EQ(cpu_list_text(machine.numa_nodes[1].cpus), "8-15");
  EXPECT_EQ(cpu_list_text(machine.cpus), "0-15");
}

TEST_F(FakeSysfs, FindsThePciFunctionAboveAVirtioDevice) {
  Discovery found = discover_fake();
  const Nic* eth0 = found.machine.find_nic("eth0");
  ASSERT_NE(eth0, nullptr);
  const std::string real_root = fs::canonical(root_).string();
  EXPECT_EQ(eth0->sysfs_device_path, real_root + "/devices/pci0000:00/0000:00:03.0/virtio2");
  EXPECT_EQ(eth0->pci_path, real_root + "/devices/pci0000:00/0000:00:03.0");  // ends in the bus id, as NCCL needs
  EXPECT_EQ(eth0->pci_bus_id, "0000:00:03.0");
  EXPECT_EQ(eth0->pci_upstream, (std::vector<std::string>{"pci0000:00"}));
  EXPECT_EQ(eth0->vendor_id, 0x1af4);
  EXPECT_EQ(eth0->class_id, 0x0200);
  EXPECT_EQ(eth0->numa_node, -1);  // numa_node -1 on a two-node machine stays unknown
  EXPECT_EQ(cpu_list_text(eth0->cpus), "0-1");
  EXPECT_EQ(eth0->speed_mbps, 0);  // virtio reports -1
  EXPECT_EQ(eth0->address, "02:fc:00:00:00:01");
  EXPECT_FALSE(eth0->is_virtual);
}

TEST_F(FakeSysfs, PlacesASwitchedNicAndPairsItsRdmaDevice) {
  Discovery found = discover_fake();
  const Nic* ens5 = found.machine.find_nic("ens5");
  const Nic* mlx5 = found.machine.find_nic("mlx5_2");
  ASSERT_TRUE(ens5 != nullptr && mlx5 != nullptr);
  EXPECT_EQ(ens5->pci_bus_id, "0000:85:00.0");
  EXPECT_EQ(ens5->pci_upstream,
            (std::vector<std::string>{"pci0000:80", "0000:80:01.0", "0000:81:00.0", "0000:82:02.0"}));
  EXPECT_EQ(ens5->numa_node, 1);
  EXPECT_EQ(cpu_list_text(ens5->cpus), "8-15");
  EXPECT_EQ(ens5->speed_mbps, 100000);
  EXPECT_EQ(ens5->paired, "mlx5_2");
  EXPECT_EQ(mlx5->kind, NicKind::kRdma);
  EXPECT_EQ(mlx5->paired, "ens5");
  EXPECT_EQ(mlx5->speed_mbps, 200000);
  EXPECT_EQ(mlx5->address, "b83f:d203:0010:0a20");
  EXPECT_EQ(mlx5->guid, ens5->guid);
  EXPECT_EQ(classify(*ens5, *found.machine.find_nic("eth0")), PathClass::kSYS);
}

TEST_F(FakeSysfs, KeepsVirtualInterfacesFlagged) {
  Discovery found = discover_fake();
  const Nic* veth = found.machine.find_nic("veth0");
  ASSERT_NE(veth, nullptr);
  EXPECT_TRUE(veth->is_virtual);
  EXPECT_EQ(veth->pci_bus_id, "");
  EXPECT_EQ(veth->sysfs_device_path, "");
  EXPECT_EQ(veth->speed_mbps, 10000);
  EXPECT_EQ(cpu_list_text(veth->cpus), "0-15");  // unknown node: the whole machine
}

TEST_F(FakeSysfs, ReadsNicsBehindAVmdDomain) {
  // Intel VMD puts devices in a synthetic PCI domain with a five-digit number below a host device.
  std::string path = "devices/pci0000:00/0000:00:0e.0";
  pci_function(path, "0", "0-7", "0x8086", "0x467f");
  path += "/pci10000:e0";
  dir(path);
  path += "/10000:e0:06.0";
  pci_function(path, "0", "0-7", "0x8086", "0xa74d");
  path += "/10000:e1:00.0";
  pci_function(path, "0", "0-7", "0x8086", "0x1593");
  net_device(path, "enp225s0", "3c:fd:fe:00:00:01", "25000", "../../../10000:e1:00.0");
  Discovery found = discover_fake();
  const Nic* nic = found.machine.find_nic("enp225s0");
  ASSERT_NE(nic, nullptr);
  EXPECT_EQ(nic->pci_bus_id, "10000:e1:00.0");
  EXPECT_EQ(nic->pci_upstream,
            (std::vector<std::string>{"pci0000:00", "0000:00:0e.0", "pci10000:e0", "10000:e0:06.0"}));
  EXPECT_EQ(nic->numa_node, 0);
  EXPECT_EQ(nic->speed_mbps, 25000);
  EXPECT_EQ(classify(*nic, *found.machine.find_nic("eth0")), PathClass::kPHB);
}

TEST(SysfsFallback, MissingSysfsStillYieldsAMachineAndSaysWhy) {
  Options options;
  options.sysfs_root = "/nonexistent-sysfs";
  options.use_hwloc = false;
  options.query_cuda = false;
  Discovery found = discover(options);
  ASSERT_TRUE(found.ok);
  EXPECT_TRUE(found.machine.nics.empty());
  bool named = false;
  for (const auto& note : found.machine.notes) named = named || note.find("/nonexistent-sysfs") != std::string::npos;
  EXPECT_TRUE(named) << "no note names the missing sysfs";
}

Machine hwloc_view_of(const std::string& fixture) {
  Machine view;
  std::string error;
  EXPECT_TRUE(read_with_hwloc(std::string(SIEVE_TOPOLOGY_FIXTURES) + "/" + fixture, view, error)) << error;
  return view;
}

TEST_F(FakeSysfs, WhereHwlocSeesNoPciSysfsPlacesTheNicsAndSaysSo) {
  Machine machine = combine_live_views(true, hwloc_view_of("vm_virtio_no_pci.xml"), "", read_sysfs_nics(root_), root_);
  EXPECT_EQ(machine.source, Source::kSysfs);
  ASSERT_EQ(machine.notes.size(), 1u);
  EXPECT_NE(machine.notes[0].find("hwloc sees no PCI"), std::string::npos) << machine.notes[0];
  ASSERT_EQ(machine.numa_nodes.size(), 1u);  // NUMA and CPUs still from hwloc
  EXPECT_EQ(cpu_list_text(machine.cpus), "0-1");
  const Nic* eth0 = machine.find_nic("eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_EQ(eth0->pci_bus_id, "0000:00:03.0");
  EXPECT_EQ(eth0->numa_node, 0);  // sysfs says -1; the machine has one node
}

TEST_F(FakeSysfs, SysfsAddsSpeedDeviceLinksAndVirtualInterfacesToHwlocsView) {
  Machine machine =
      combine_live_views(true, hwloc_view_of("two_socket_8gpu_4nic.xml"), "", read_sysfs_nics(root_), root_);
  EXPECT_EQ(machine.source, Source::kTopologyFile);  // the view's own source is kept
  EXPECT_TRUE(machine.notes.empty());
  const Nic* mlx5_2 = machine.find_nic("mlx5_2");
  ASSERT_NE(mlx5_2, nullptr);
  EXPECT_EQ(mlx5_2->speed_mbps, 200000);
  EXPECT_EQ(mlx5_2->paired, "eth2");  // hwloc's pairing stays
  EXPECT_NE(mlx5_2->sysfs_device_path, "");
  const Nic* ib0 = machine.find_nic("ib0");
  ASSERT_NE(ib0, nullptr);
  EXPECT_EQ(ib0->pci_bus_id, "0000:04:00.0");
  EXPECT_EQ(ib0->speed_mbps, 0);
  const Nic* veth0 = machine.find_nic("veth0");
  ASSERT_NE(veth0, nullptr);
  EXPECT_TRUE(veth0->is_virtual);
  EXPECT_EQ(cpu_list_text(veth0->cpus), "0-15");
  EXPECT_EQ(machine.gpus.size(), 8u);
}

TEST_F(FakeSysfs, WhenHwlocFailsSysfsDescribesTheWholeMachine) {
  Machine machine =
      combine_live_views(false, Machine{}, "hwloc cannot load this machine: boom", read_sysfs_nics(root_), root_);
  EXPECT_EQ(machine.source, Source::kSysfs);
  ASSERT_FALSE(machine.notes.empty());
  EXPECT_NE(machine.notes[0].find("boom; using sysfs"), std::string::npos) << machine.notes[0];
  EXPECT_EQ(machine.numa_nodes.size(), 2u);
  EXPECT_EQ(machine.nics.size(), 4u);
}

}  // namespace
}  // namespace sieve::topology
