// SPDX-License-Identifier: Apache-2.0
// This machine: what discover() reports must agree with /sys/class/net/*/device and with lstopo.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "topology/discover.h"

namespace sieve::topology {
namespace {

Machine live() {
  Options options;
  options.query_cuda = false;
  Discovery found = discover(options);
  EXPECT_TRUE(found.ok) << found.error;
  return found.machine;
}

// name -> realpath of /sys/class/net/<name>/device ("" for virtual interfaces).
std::map<std::string, std::string> sysfs_interfaces() {
  std::map<std::string, std::string> result;
  DIR* dir = opendir("/sys/class/net");
  if (dir == nullptr) return result;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    char* real = realpath(("/sys/class/net/" + name + "/device").c_str(), nullptr);
    result[name] = real != nullptr ? real : "";
    free(real);
  }
  closedir(dir);
  return result;
}

TEST(LiveMachine, EveryInterfaceOfSysClassNetIsListedWithItsDevice) {
  // Other tests create and delete veth pairs concurrently: only interfaces present before and
  // after discovery are compared.
  const auto before = sysfs_interfaces();
  const Machine machine = live();
  const auto after = sysfs_interfaces();
  ASSERT_FALSE(before.empty()) << "no /sys/class/net";
  size_t compared = 0;
  for (const auto& [name, device] : before) {
    auto still = after.find(name);
    if (still == after.end() || still->second != device) continue;
    ++compared;
    const Nic* nic = machine.find_nic(name);
    ASSERT_NE(nic, nullptr) << name;
    EXPECT_EQ(nic->kind, NicKind::kNetdev);
    EXPECT_EQ(nic->is_virtual, device.empty()) << name;
    EXPECT_EQ(nic->sysfs_device_path, device) << name;
    EXPECT_FALSE(nic->cpus.empty()) << name;
    if (device.empty() || nic->pci_bus_id.empty()) continue;
    // The PCI function is the device itself or its nearest PCI ancestor (virtio sits below one).
    EXPECT_EQ(device.compare(0, nic->pci_path.size(), nic->pci_path), 0) << name << ": " << nic->pci_path;
    EXPECT_EQ(nic->pci_path.substr(nic->pci_path.rfind('/') + 1), nic->pci_bus_id) << name;
  }
  EXPECT_GT(compared, 0u);
  EXPECT_FALSE(machine.numa_nodes.empty());
  EXPECT_FALSE(machine.cpus.empty());
}

TEST(LiveMachine, AgreesWithLstopo) {
  const std::string xml = testing::TempDir() + "/sieve_live_lstopo.xml";
  const std::string command = "lstopo-no-graphics --of xml --force " + xml + " >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "lstopo-no-graphics not available";
  Options from_file;
  from_file.xml_file = xml;
  Discovery lstopo = discover(from_file);
  std::remove(xml.c_str());
  ASSERT_TRUE(lstopo.ok) << lstopo.error;
  const Machine machine = live();
  EXPECT_EQ(machine.numa_nodes.size(), lstopo.machine.numa_nodes.size());
  EXPECT_EQ(machine.gpus.size(), lstopo.machine.gpus.size());
  for (const auto& seen : lstopo.machine.nics) {
    const Nic* nic = machine.find_nic(seen.name);
    ASSERT_NE(nic, nullptr) << seen.name << " is in lstopo's XML";
    EXPECT_EQ(nic->pci_bus_id, seen.pci_bus_id) << seen.name;
    EXPECT_EQ(nic->pci_upstream, seen.pci_upstream) << seen.name;
    EXPECT_EQ(nic->numa_node, seen.numa_node) << seen.name;
    EXPECT_EQ(nic->cpus, seen.cpus) << seen.name;
  }
}

}  // namespace
}  // namespace sieve::topology
