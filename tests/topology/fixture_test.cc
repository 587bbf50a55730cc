// SPDX-License-Identifier: Apache-2.0
// Discovery from hwloc XML topologies of machines this host is not: a 2-socket node with 8 GPUs and
// 4 NICs behind PCIe switches, a single-socket box with one dual-port NIC, a VM without PCI.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "topology/discover.h"

namespace sieve::topology {
namespace {

Machine load(const std::string& file) {
  Options options;
  options.xml_file = std::string(SIEVE_TOPOLOGY_FIXTURES) + "/" + file;
  Discovery found = discover(options);
  EXPECT_TRUE(found.ok) << found.error;
  EXPECT_EQ(found.machine.source, Source::kTopologyFile);
  return found.machine;
}

std::vector<std::string> names(const Machine& machine, NicKind kind) {
  std::vector<std::string> result;
  for (const auto& nic : machine.nics)
    if (nic.kind == kind) result.push_back(nic.name);
  return result;
}

std::vector<int> netdev_indices(const Machine& machine) {
  std::vector<int> result;
  for (size_t i = 0; i < machine.nics.size(); ++i)
    if (machine.nics[i].kind == NicKind::kNetdev) result.push_back(static_cast<int>(i));
  return result;
}

TEST(TwoSocketNode, ListsNicsGpusAndNumaNodes) {
  Machine machine = load("two_socket_8gpu_4nic.xml");
  EXPECT_EQ(names(machine, NicKind::kNetdev), (std::vector<std::string>{"ib0", "ib1", "eth2", "eth3"}));
  EXPECT_EQ(names(machine, NicKind::kRdma), (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}));
  ASSERT_EQ(machine.numa_nodes.size(), 2u);
  EXPECT_EQ(cpu_list_text(machine.numa_nodes[0].cpus), "0-7");
  EXPECT_EQ(cpu_list_text(machine.numa_nodes[1].cpus), "8-15");
  EXPECT_EQ(machine.numa_nodes[1].memory_bytes, 274877906944ull);
  EXPECT_EQ(cpu_list_text(machine.cpus), "0-15");
  EXPECT_TRUE(machine.notes.empty());

  const std::vector<std::string> gpu_bus_ids = {"0000:03:00.0", "0000:07:00.0", "0000:33:00.0", "0000:34:00.0",
                                                "0000:83:00.0", "0000:84:00.0", "0000:b3:00.0", "0000:b4:00.0"};
  ASSERT_EQ(machine.gpus.size(), gpu_bus_ids.size());
  for (size_t i = 0; i < gpu_bus_ids.size(); ++i) {
    const Gpu& gpu = machine.gpus[i];
    EXPECT_EQ(gpu.pci_bus_id, gpu_bus_ids[i]);
    EXPECT_EQ(gpu.numa_node, i < 4 ? 0 : 1) << gpu.pci_bus_id;
    EXPECT_EQ(cpu_list_text(gpu.cpus), i < 4 ? "0-7" : "8-15");
    EXPECT_EQ(gpu.vendor_id, 0x10de);
    EXPECT_EQ(gpu.class_id, 0x0302);
    EXPECT_EQ(gpu.cuda_index, -1);  // a topology file says nothing about CUDA here
  }
}

TEST(TwoSocketNode, NicCarriesWhatGetPropertiesNeeds) {
  Machine machine = load("two_socket_8gpu_4nic.xml");
  const Nic* ib0 = machine.find_nic("ib0");
  ASSERT_NE(ib0, nullptr);
  EXPECT_EQ(ib0->pci_bus_id, "0000:04:00.0");
  EXPECT_EQ(ib0->pci_path, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0");
  EXPECT_EQ(ib0->pci_upstream,
            (std::vector<std::string>{"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}));
  EXPECT_EQ(ib0->numa_node, 0);
  EXPECT_EQ(cpu_list_text(ib0->cpus), "0-7");
  EXPECT_EQ(ib0->paired, "mlx5_0");
  EXPECT_EQ(ib0->vendor_id, 0x15b3);
  EXPECT_EQ(ib0->speed_mbps, 0);  // hwloc records no link speed
  EXPECT_FALSE(ib0->is_virtual);
  EXPECT_EQ(ib0->address, "00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:10:0a:00");
  const Nic* mlx5_0 = machine.find_nic("mlx5_0");
  ASSERT_NE(mlx5_0, nullptr);
  EXPECT_EQ(mlx5_0->kind, NicKind::kRdma);
  EXPECT_EQ(mlx5_0->paired, "ib0");
  EXPECT_EQ(mlx5_0->address, "b83f:d203:0010:0a00");
  EXPECT_EQ(mlx5_0->guid, ib0->guid);  // one PCI function
  const Nic* eth3 = machine.find_nic("eth3");
  ASSERT_NE(eth3, nullptr);
  EXPECT_EQ(eth3->numa_node, 1);
  EXPECT_EQ(eth3->pci_path, "/sys/devices/pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:02.0/0000:b5:00.0");
  // Four different cards, four different guids.
  EXPECT_NE(machine.find_nic("ib0")->guid, machine.find_nic("ib1")->guid);
  EXPECT_NE(machine.find_nic("eth2")->guid, machine.find_nic("eth3")->guid);
  EXPECT_EQ(machine.find_nic("ib7"), nullptr);
  EXPECT_EQ(summary(*ib0), "ib0 (netdev) pci 0000:04:00.0 numa 0 cpus 0-7 speed unknown");
}

TEST(TwoSocketNode, DistanceMatrixLikeNvidiaSmiTopo) {
  Machine machine = load("two_socket_8gpu_4nic.xml");
  // Rows: GPU0..7; columns: ib0 ib1 eth2 eth3.
  const std::vector<std::vector<const char*>> expected = {
      {"PIX", "NODE", "SYS", "SYS"},   // GPU0 shares ib0's switch
      {"PXB", "NODE", "SYS", "SYS"},   // GPU1 sits behind a second switch
      {"NODE", "PHB", "SYS", "SYS"},   // GPU2: ib1 hangs from another root port of its host bridge
      {"NODE", "PHB", "SYS", "SYS"},   // GPU3
      {"SYS", "SYS", "PIX", "NODE"},   // GPU4
      {"SYS", "SYS", "PIX", "NODE"},   // GPU5
      {"SYS", "SYS", "NODE", "PIX"},   // GPU6
      {"SYS", "SYS", "NODE", "PIX"}};  // GPU7
  const std::vector<int> columns = netdev_indices(machine);
  ASSERT_EQ(columns.size(), 4u);
  ASSERT_EQ(machine.gpus.size(), expected.size());
  for (size_t g = 0; g < expected.size(); ++g)
    for (size_t n = 0; n < columns.size(); ++n)
      EXPECT_STREQ(path_class_name(classify(machine.gpus[g], machine.nics[static_cast<size_t>(columns[n])])),
                   expected[g][n])
          << "GPU" << g << " x " << machine.nics[static_cast<size_t>(columns[n])].name;
}

TEST(TwoSocketNode, ChoosesTheClosestNicPerGpu) {
  Machine machine = load("two_socket_8gpu_4nic.xml");
  const std::vector<std::string> netdev = {"ib0", "ib0", "ib1", "ib1", "eth2", "eth2", "eth3", "eth3"};
  const std::vector<std::string> rdma = {"mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1",
                                         "mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3"};
  for (size_t g = 0; g < machine.gpus.size(); ++g) {
    const int n = best_nic_for(machine, g);
    const int r = best_nic_for(machine, g, NicKind::kRdma);
    ASSERT_GE(n, 0);
    ASSERT_GE(r, 0);
    EXPECT_EQ(machine.nics[static_cast<size_t>(n)].name, netdev[g]) << "GPU" << g;
    EXPECT_EQ(machine.nics[static_cast<size_t>(r)].name, rdma[g]) << "GPU" << g;
  }
}

TEST(SingleSocketBox, OneDualPortCardSharesItsGuid) {
  Machine machine = load("single_socket_1nic.xml");
  EXPECT_EQ(names(machine, NicKind::kNetdev), (std::vector<std::string>{"enp2s0f0np0", "enp2s0f1np1"}));
  EXPECT_EQ(names(machine, NicKind::kRdma), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  ASSERT_EQ(machine.numa_nodes.size(), 1u);
  EXPECT_EQ(cpu_list_text(machine.numa_nodes[0].cpus), "0-3");
  ASSERT_EQ(machine.gpus.size(), 1u);
  EXPECT_EQ(machine.gpus[0].pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(machine.gpus[0].class_id, 0x0300);  // a VGA-class GeForce counts as a GPU too
  const Nic* port0 = machine.find_nic("enp2s0f0np0");
  const Nic* port1 = machine.find_nic("enp2s0f1np1");
  ASSERT_TRUE(port0 != nullptr && port1 != nullptr);
  EXPECT_EQ(port0->pci_bus_id, "0000:02:00.0");
  EXPECT_EQ(port1->pci_bus_id, "0000:02:00.1");
  EXPECT_EQ(port0->guid, port1->guid);
  EXPECT_EQ(port0->pci_path, "/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0");
  EXPECT_EQ(port0->numa_node, 0);
  EXPECT_EQ(classify(machine.gpus[0], *port0), PathClass::kPHB);
  EXPECT_EQ(classify(machine.gpus[0], *port1), PathClass::kPHB);
  const int best = best_nic_for(machine, 0);
  ASSERT_GE(best, 0);
  EXPECT_EQ(machine.nics[static_cast<size_t>(best)].name, "enp2s0f0np0");
}

TEST(VirtualMachine, VirtioNicWithoutPciIsPlacedByNumaAndNoted) {
  Machine machine = load("vm_virtio_no_pci.xml");
  ASSERT_EQ(machine.nics.size(), 1u);
  const Nic& eth0 = machine.nics[0];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_EQ(eth0.kind, NicKind::kNetdev);
  EXPECT_EQ(eth0.pci_bus_id, "");
  EXPECT_EQ(eth0.pci_path, "");
  EXPECT_EQ(eth0.address, "52:54:00:12:34:56");
  EXPECT_EQ(eth0.numa_node, 0);
  EXPECT_EQ(cpu_list_text(eth0.cpus), "0-1");
  EXPECT_NE(eth0.guid, 0u);
  EXPECT_TRUE(machine.gpus.empty());
  EXPECT_EQ(best_nic_for(machine, 0), -1);
  ASSERT_EQ(machine.notes.size(), 1u);
  EXPECT_NE(machine.notes[0].find("no NIC or GPU on PCI"), std::string::npos) << machine.notes[0];
}

TEST(TopologyFile, MissingOrInvalidFileIsAClearError) {
  Options options;
  options.xml_file = "/nonexistent/topo.xml";
  Discovery found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("/nonexistent/topo.xml"), std::string::npos) << found.error;

  const std::string junk = testing::TempDir() + "/sieve_not_a_topology.xml";
  std::ofstream(junk) << "this is not XML\n";
  options.xml_file = junk;
  found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find(junk), std::string::npos) << found.error;
  std::remove(junk.c_str());
}

// SIEVE_TOPO_FILE is read whole: a file far larger than any topology (sparse here, nothing is
// written), a device and a FIFO (which would block the job) are refused, by name and with the reason.
TEST(TopologyFile, HugeOrSpecialFilesAreRefusedUnread) {
  Options options;
  const std::string huge = testing::TempDir() + "/sieve_huge_topology.xml";
  { std::ofstream(huge) << "<?xml"; }
  ASSERT_EQ(::truncate(huge.c_str(), 64 << 20), 0);
  options.xml_file = huge;
  Discovery found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("byte limit"), std::string::npos) << found.error;
  std::remove(huge.c_str());

  options.xml_file = "/dev/zero";
  found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("not a regular file"), std::string::npos) << found.error;

  const std::string fifo = testing::TempDir() + "/sieve_topology_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  options.xml_file = fifo;
  found = discover(options);  // no writer: a blocking open would never return
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("not a regular file"), std::string::npos) << found.error;
  std::remove(fifo.c_str());
}

// hwloc 2.9 crashes (a null bitmap) on an object with a cpuset and no complete_cpuset, as the
// topology fuzzer found: such a file is refused with the reason before hwloc sees it.
TEST(TopologyFile, AnObjectWithoutItsCompleteSetIsRefusedNotACrash) {
  std::ifstream in(std::string(SIEVE_TOPOLOGY_FIXTURES) + "/single_socket_1nic.xml");
  std::stringstream text;
  text << in.rdbuf();
  std::string xml = text.str();
  const size_t core = xml.find("<object type=\"Core\"");
  ASSERT_NE(core, std::string::npos);
  const size_t complete = xml.find(" complete_cpuset=", core);
  ASSERT_NE(complete, std::string::npos);
  xml.replace(complete, 17, " complete_uecpst=");
  const std::string path = testing::TempDir() + "/sieve_incomplete_topology.xml";
  std::ofstream(path) << xml;
  Options options;
  options.xml_file = path;
  Discovery found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("no complete_cpuset"), std::string::npos) << found.error;

  xml = text.str();  // a set hwloc asserts on
  const size_t nodeset = xml.find(" nodeset=\"0x");
  ASSERT_NE(nodeset, std::string::npos);
  xml.replace(nodeset, 12, " nodeset=\",x");
  std::ofstream(path) << xml;
  found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("not a bitmap"), std::string::npos) << found.error;

  xml = text.str();  // a leading comma on a finite set: hwloc asserts (count > 0) in hwloc_bitmap_sscanf
  xml.replace(xml.find(" nodeset=\"0x"), 12, " nodeset=\",0x");
  std::ofstream(path) << xml;
  found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("not a bitmap"), std::string::npos) << found.error;

  xml = text.str();  // the other way round, as in a fuzzer input hwloc crashed on
  const size_t pu = xml.find("<object type=\"PU\"");
  ASSERT_NE(pu, std::string::npos);
  const size_t plain = xml.find(" nodeset=", pu);
  ASSERT_NE(plain, std::string::npos);
  xml.replace(plain, 9, " nodesex=");  // a name hwloc reads, and ignores
  std::ofstream(path) << xml;
  found = discover(options);
  EXPECT_FALSE(found.ok);
  EXPECT_NE(found.error.find("complete_nodeset but no nodeset"), std::string::npos) << found.error;
  std::remove(path.c_str());
}

// hwloc's XML parser stops reading a tag's attributes at the first text it cannot read and ignores
// the rest: a complete_cpuset past such text is never seen, and hwloc 2.9 dereferences the null set
// (hwloc_bitmap_compare_first, the crash the topology fuzzer found). A NUL byte, or a <topology> tag
// that never ends, crash it too. Each is refused with the reason, before hwloc sees the file.
TEST(TopologyFile, TextHwlocCannotReadIsRefusedNotACrash) {
  std::ifstream in(std::string(SIEVE_TOPOLOGY_FIXTURES) + "/single_socket_1nic.xml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string good = text.str();
  const std::string core =
      "<object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" "
      "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"4\">";
  const size_t at = good.find(core);
  ASSERT_NE(at, std::string::npos);
  const std::string path = testing::TempDir() + "/sieve_unreadable_topology.xml";
  Options options;
  options.xml_file = path;
  auto refused = [&](const std::string& xml, const std::string& reason) {
    std::ofstream(path, std::ios::trunc) << xml;
    Discovery found = discover(options);
    EXPECT_FALSE(found.ok);
    EXPECT_NE(found.error.find(reason), std::string::npos) << found.error;
  };

  std::string xml = good;
  xml.replace(at, core.size(),
              "<object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
              "complete_nodeset=\"0x00000001\" gp_index=\"4\" Stop complete_cpuset=\"0x00000001\">");
  refused(xml, "cannot read: \"Stop complete_cpuset=");

  xml = good;  // the same with a single-quoted value, which libxml2 would read and hwloc's parser not
  xml.replace(at, core.size(),
              "<object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
              "complete_nodeset=\"0x00000001\" gp_index=\"4\" complete_cpuset='0x00000001'>");
  refused(xml, "cannot read");

  xml = good;
  xml.insert(xml.find("<topology") + 10, std::string("\0", 1));
  refused(xml, "NUL byte");

  refused("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"2.0\"", "never ends");

  std::ofstream(path, std::ios::trunc) << good;  // the untouched file still reads
  EXPECT_TRUE(discover(options).ok);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve::topology
