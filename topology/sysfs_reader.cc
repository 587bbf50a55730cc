// SPDX-License-Identifier: Apache-2.0
#include "topology/sysfs_reader.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sieve::topology {

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string real_path(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return "";
  std::string result(real);
  free(real);
  return result;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool all_hex(const std::string& text) {
  if (text.empty()) return false;
  for (unsigned char c : text)
    if (!std::isxdigit(c)) return false;
  return true;
}

// dddd:bb:dd.f, where VMD and other synthetic domains have more than four domain digits.
bool looks_like_bus_id(const std::string& text) {
  const size_t first = text.find(':');
  if (first == std::string::npos || first < 4 || first > 8) return false;
  const std::string rest = text.substr(first + 1);
  return all_hex(text.substr(0, first)) && rest.size() == 7 && rest[2] == ':' && rest[5] == '.' &&
         all_hex(rest.substr(0, 2)) && all_hex(rest.substr(3, 2)) && all_hex(rest.substr(6, 1));
}

// Fills the PCI part of `where` from the real path of a device directory: the nearest ancestor
// (itself included) whose subsystem is pci is the PCI function.
void place_from_device_path(const std::string& root, const std::string& device_path, Placement& where) {
  const std::string devices = real_path(root + "/devices");
  std::string dir = device_path;
  while (!dir.empty() && dir != devices && dir.size() > devices.size()) {
    if (base_name(real_path(dir + "/subsystem")) == "pci" && looks_like_bus_id(base_name(dir))) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  if (dir.size() <= devices.size() || dir.compare(0, devices.size(), devices) != 0) return;
  where.pci_path = dir;
  where.pci_bus_id = base_name(dir);
  std::stringstream hops(dir.substr(devices.size() + 1));
  std::string hop;
  std::vector<std::string> chain;
  while (std::getline(hops, hop, '/')) chain.push_back(hop);
  chain.pop_back();  // the function itself
  where.pci_upstream = chain;

  const std::string numa = read_first_line(dir + "/numa_node");
  if (!numa.empty()) where.numa_node = std::atoi(numa.c_str()) >= 0 ? std::atoi(numa.c_str()) : -1;
  std::string error;
  std::vector<int> cpus;
  if (parse_cpu_list(read_first_line(dir + "/local_cpulist"), cpus, error)) where.cpus = cpus;
  where.vendor_id = static_cast<uint16_t>(std::strtoul(read_first_line(dir + "/vendor").c_str(), nullptr, 16));
  where.device_id = static_cast<uint16_t>(std::strtoul(read_first_line(dir + "/device").c_str(), nullptr, 16));
  where.class_id = static_cast<uint16_t>(std::strtoul(read_first_line(dir + "/class").c_str(), nullptr, 16) >> 8);
}

// "100 Gb/sec (4X EDR)" -> 100000.
int64_t parse_rdma_rate_mbps(const std::string& rate) {
  char* end = nullptr;
  const double gbps = std::strtod(rate.c_str(), &end);
  if (end == rate.c_str() || gbps <= 0) return 0;
  return static_cast<int64_t>(gbps * 1000.0 + 0.5);
}

}  // namespace

std::vector<Nic> read_sysfs_nics(const std::string& root) {
  std::vector<Nic> nics;
  const std::string net = root + "/class/net";
  for (const auto& name : list_dir(net)) {
    Nic nic;
    nic.name = name;
    nic.kind = NicKind::kNetdev;
    nic.sysfs_device_path = real_path(net + "/" + name + "/device");
    nic.is_virtual = nic.sysfs_device_path.empty();
    if (!nic.is_virtual) place_from_device_path(root, nic.sysfs_device_path, nic);
    nic.address = read_first_line(net + "/" + name + "/address");
    // Reading speed fails (EINVAL) on a down link and gives -1 on virtio: both mean unknown.
    const std::string speed = read_first_line(net + "/" + name + "/speed");
    const long long mbps = speed.empty() ? 0 : std::atoll(speed.c_str());
    nic.speed_mbps = mbps > 0 ? mbps : 0;
    nic.guid = card_guid(nic.pci_bus_id, nic.name);
    nics.push_back(std::move(nic));
  }
  const std::string ib = root + "/class/infiniband";
  for (const auto& name : list_dir(ib)) {
    Nic nic;
    nic.name = name;
    nic.kind = NicKind::kRdma;
    nic.sysfs_device_path = real_path(ib + "/" + name + "/device");
    nic.is_virtual = nic.sysfs_device_path.empty();
    if (!nic.is_virtual) place_from_device_path(root, nic.sysfs_device_path, nic);
    nic.address = read_first_line(ib + "/" + name + "/node_guid");
    nic.speed_mbps = parse_rdma_rate_mbps(read_first_line(ib + "/" + name + "/ports/1/rate"));
    nic.guid = card_guid(nic.pci_bus_id, nic.name);
    nics.push_back(std::move(nic));
  }
  // A netdev and an RDMA device on the same PCI function are two faces of one port.
  for (auto& a : nics) {
    if (a.pci_bus_id.empty() || !a.paired.empty()) continue;
    for (auto& b : nics)
      if (b.kind != a.kind && b.pci_bus_id == a.pci_bus_id && b.paired.empty()) {
        a.paired = b.name;
        b.paired = a.name;
        break;
      }
  }
  return nics;
}

bool read_sysfs_numa(const std::string& root, std::vector<NumaNode>& nodes, std::vector<int>& cpus) {
  std::string error;
  if (!parse_cpu_list(read_first_line(root + "/devices/system/cpu/online"), cpus, error) || cpus.empty()) return false;
  const std::string base = root + "/devices/system/node";
  for (const auto& name : list_dir(base)) {
    if (name.size() < 5 || name.compare(0, 4, "node") != 0 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    NumaNode node;
    node.os_index = std::atoi(name.c_str() + 4);
    if (!parse_cpu_list(read_first_line(base + "/" + name + "/cpulist"), node.cpus, error)) node.cpus.clear();
    nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  return true;
}

}  // namespace sieve::topology
