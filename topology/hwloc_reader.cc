// SPDX-License-Identifier: Apache-2.0
#include "topology/hwloc_reader.h"

#include <fcntl.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "topology/hwloc_xml_check.h"

namespace sieve::topology {

namespace {

// Owns one hwloc topology handle.
class HwlocTopology {
 public:
  HwlocTopology() = default;
  ~HwlocTopology() {
    if (topology_ != nullptr) hwloc_topology_destroy(topology_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  // Returns "" on success, else why it failed. `xml` (with `xml_file` naming it) is a topology
  // file's contents; both empty: the live machine.
  std::string load(const std::string& xml_file, const std::string& xml) {
    if (hwloc_topology_init(&topology_) != 0) {
      topology_ = nullptr;
      return std::string("hwloc_topology_init failed: ") + std::strerror(errno);
    }
    // Keeps PCI devices that matter (GPUs, NICs, storage), the bridges above them and their OS
    // devices (network interfaces, RDMA devices).
    hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (xml_file.empty() && xml.empty()) {
      // hwloc's Linux backend reads PCI devices from sysfs by itself. Left out: libpciaccess (it
      // leaks on every load and adds nothing here), and the OpenCL and GL backends, which would open
      // GPU driver stacks and X displays from inside a training job.
      for (const char* component : {"pci", "opencl", "gl"})
        hwloc_topology_set_components(topology_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
    } else {
      // From the bytes already read and checked, not the path: the file cannot change in between.
      if (xml.size() >= static_cast<size_t>(INT32_MAX) ||
          hwloc_topology_set_xmlbuffer(topology_, xml.c_str(), static_cast<int>(xml.size() + 1)) != 0)
        return "hwloc rejects topology file '" + xml_file + "': " + std::strerror(errno);
    }
    if (hwloc_topology_load(topology_) != 0) {
      return xml_file.empty() && xml.empty() ? std::string("hwloc cannot load this machine: ") + std::strerror(errno)
                                             : "hwloc cannot load topology file '" + xml_file + "' (not hwloc XML?)";
    }
    return "";
  }

  hwloc_topology_t get() const { return topology_; }

 private:
  hwloc_topology_t topology_ = nullptr;
};

std::vector<int> bitmap_to_list(hwloc_const_bitmap_t bitmap) {
  std::vector<int> result;
  if (bitmap == nullptr || hwloc_bitmap_iszero(bitmap)) return result;
  // An infinite bitmap ends with -1 from hwloc_bitmap_last: the loop below would never end.
  if (hwloc_bitmap_last(bitmap) < 0) return result;
  for (int index = hwloc_bitmap_first(bitmap); index >= 0; index = hwloc_bitmap_next(bitmap, index))
    result.push_back(index);
  return result;
}

std::string bus_id_text(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%01x", static_cast<unsigned>(pci.domain),
                static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev), static_cast<unsigned>(pci.func));
  return text;
}

// The host bridge as Linux names its sysfs directory: pci<domain>:<first bus below it>.
std::string host_bridge_text(const hwloc_obj_attr_u::hwloc_bridge_attr_s& bridge) {
  char text[32];
  std::snprintf(text, sizeof(text), "pci%04x:%02x", static_cast<unsigned>(bridge.downstream.pci.domain),
                static_cast<unsigned>(bridge.downstream.pci.secondary_bus));
  return text;
}

// Fills the placement of PCI function `pci` (bus id, bridges above it, sysfs path, locality).
void place_pci_device(hwloc_obj_t pci, bool live, Placement& where) {
  where.pci_bus_id = bus_id_text(pci->attr->pcidev);
  where.vendor_id = pci->attr->pcidev.vendor_id;
  where.device_id = pci->attr->pcidev.device_id;
  where.class_id = pci->attr->pcidev.class_id;
  std::vector<std::string> upstream;
  for (hwloc_obj_t parent = pci->parent; parent != nullptr && parent->type == HWLOC_OBJ_BRIDGE;
       parent = parent->parent) {
    const auto& bridge = parent->attr->bridge;
    // hwloc copies a topology file's bridge_type number into the enum unchecked ("2-1" gives 2,
    // which no enumerator has: UBSan's finding in topology/fuzz); read it as the number it is.
    std::underlying_type_t<hwloc_obj_bridge_type_t> type;
    std::memcpy(&type, &bridge.upstream_type, sizeof type);
    if (type == HWLOC_OBJ_BRIDGE_HOST) upstream.push_back(host_bridge_text(bridge));
    else if (type == HWLOC_OBJ_BRIDGE_PCI) upstream.push_back(bus_id_text(bridge.upstream.pci));
    else break;  // an upstream hwloc does not know: the path stops at the devices above it
  }
  std::reverse(upstream.begin(), upstream.end());
  where.pci_upstream = upstream;

  std::string path = "/sys/devices";
  for (const auto& hop : upstream) path += "/" + hop;
  path += "/" + where.pci_bus_id;
  if (live) {
    // The real path wins where the kernel inserts levels hwloc does not show (VMD domains).
    char* real = realpath(("/sys/bus/pci/devices/" + where.pci_bus_id).c_str(), nullptr);
    if (real != nullptr) {
      path = real;
      free(real);
    }
  }
  where.pci_path = path;
}

void place_by_ancestor(hwloc_topology_t topology, hwloc_obj_t obj, bool live, Placement& where) {
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology, obj);
  if (ancestor == nullptr) return;
  where.cpus = bitmap_to_list(ancestor->cpuset);
  std::vector<int> nodes = bitmap_to_list(ancestor->nodeset);
  where.numa_node = nodes.size() == 1 ? nodes[0] : -1;
  if (where.numa_node >= 0 || !live || where.pci_bus_id.empty()) return;
  // hwloc attaches a device to an object spanning several nodes (sub-NUMA clustering) where the
  // kernel still knows the one node it is wired to.
  std::FILE* file = std::fopen(("/sys/bus/pci/devices/" + where.pci_bus_id + "/numa_node").c_str(), "r");
  if (file == nullptr) return;
  int node = -1;
  if (std::fscanf(file, "%d", &node) == 1 && node >= 0 && std::find(nodes.begin(), nodes.end(), node) != nodes.end()) {
    where.numa_node = node;
    if (hwloc_obj_t numa = hwloc_get_numanode_obj_by_os_index(topology, static_cast<unsigned>(node)))
      where.cpus = bitmap_to_list(numa->cpuset);
  }
  std::fclose(file);
}

const char* info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  return value != nullptr ? value : "";
}

void read_nics(hwloc_topology_t topology, bool live, std::vector<Nic>& nics) {
  for (hwloc_obj_t osdev = hwloc_get_next_osdev(topology, nullptr); osdev != nullptr;
       osdev = hwloc_get_next_osdev(topology, osdev)) {
    const auto type = osdev->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    if (osdev->name == nullptr) continue;
    Nic nic;
    nic.name = osdev->name;
    nic.kind = type == HWLOC_OBJ_OSDEV_NETWORK ? NicKind::kNetdev : NicKind::kRdma;
    nic.address = info(osdev, type == HWLOC_OBJ_OSDEV_NETWORK ? "Address" : "NodeGUID");
    hwloc_obj_t parent = osdev->parent;
    if (parent != nullptr && parent->type == HWLOC_OBJ_PCI_DEVICE) {
      place_pci_device(parent, live, nic);
      for (hwloc_obj_t sibling = parent->io_first_child; sibling != nullptr; sibling = sibling->next_sibling) {
        if (sibling == osdev || sibling->type != HWLOC_OBJ_OS_DEVICE || sibling->name == nullptr) continue;
        const auto sibling_type = sibling->attr->osdev.type;
        const bool other_kind = nic.kind == NicKind::kNetdev ? sibling_type == HWLOC_OBJ_OSDEV_OPENFABRICS
                                                             : sibling_type == HWLOC_OBJ_OSDEV_NETWORK;
        if (other_kind && nic.paired.empty()) nic.paired = sibling->name;
      }
    }
    place_by_ancestor(topology, osdev, live, nic);
    nic.guid = card_guid(nic.pci_bus_id, nic.name);
    nics.push_back(std::move(nic));
  }
}

bool is_nvidia_gpu(hwloc_obj_t pci) {
  // Class 0x03xx is a display controller: VGA (0x0300) on workstations, 3D (0x0302) on servers.
  return pci->attr->pcidev.vendor_id == 0x10de && (pci->attr->pcidev.class_id >> 8) == 0x03;
}

void read_gpus(hwloc_topology_t topology, bool live, std::vector<Gpu>& gpus) {
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topology, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(topology, pci)) {
    if (!is_nvidia_gpu(pci)) continue;
    Gpu gpu;
    place_pci_device(pci, live, gpu);
    place_by_ancestor(topology, pci, live, gpu);
    // hwloc's CUDA backend (where built in) names the device's CUDA ordinal: "cuda<N>".
    for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
      if (child->type != HWLOC_OBJ_OS_DEVICE || child->name == nullptr) continue;
      int index = -1;
      char tail = 0;
      if (std::sscanf(child->name, "cuda%d%c", &index, &tail) == 1 && index >= 0) gpu.cuda_index = index;
    }
    gpus.push_back(std::move(gpu));
  }
}

void read_numa(hwloc_topology_t topology, Machine& machine) {
  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, nullptr); node != nullptr;
       node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) {
    NumaNode numa;
    numa.os_index = static_cast<int>(node->os_index);
    numa.cpus = bitmap_to_list(node->cpuset);
    numa.memory_bytes = node->attr != nullptr ? node->attr->numanode.local_memory : 0;
    machine.numa_nodes.push_back(std::move(numa));
  }
  machine.cpus = bitmap_to_list(hwloc_topology_get_topology_cpuset(topology));
}

}  // namespace

std::string read_topology_file(const std::string& path, std::string* contents) {
  // Non-blocking, so a FIFO cannot stall the job here; its type is checked before any read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "cannot read topology file '" + path + "': " + std::strerror(errno);
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = "cannot stat topology file '" + path + "': " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "topology file '" + path + "' is not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) > kMaxTopologyFileBytes) {
    why = "topology file '" + path + "' is " + std::to_string(st.st_size) + " bytes, more than the " +
          std::to_string(kMaxTopologyFileBytes) + "-byte limit (an hwloc XML file is far smaller)";
  } else {
    contents->assign(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < contents->size()) {
      const ssize_t n = ::read(fd, contents->data() + done, contents->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (done != contents->size()) why = "cannot read topology file '" + path + "': it changed while read";
  }
  ::close(fd);
  return why;
}

bool read_with_hwloc_xml(const std::string& name, const std::string& xml, Machine& machine, std::string& error) {
  error = check_hwloc_xml(name, xml);
  if (!error.empty()) return false;
  HwlocTopology topology;
  error = topology.load(name, xml);
  if (!error.empty()) return false;
  machine.source = Source::kTopologyFile;
  read_numa(topology.get(), machine);
  read_nics(topology.get(), false, machine.nics);
  read_gpus(topology.get(), false, machine.gpus);
  return true;
}

bool read_with_hwloc(const std::string& xml_file, Machine& machine, std::string& error) {
  if (!xml_file.empty()) {
    std::string xml;
    error = read_topology_file(xml_file, &xml);
    return error.empty() && read_with_hwloc_xml(xml_file, xml, machine, error);
  }
  HwlocTopology topology;
  error = topology.load("", "");
  if (!error.empty()) return false;
  machine.source = Source::kLiveHwloc;
  read_numa(topology.get(), machine);
  read_nics(topology.get(), true, machine.nics);
  read_gpus(topology.get(), true, machine.gpus);
  return true;
}

}  // namespace sieve::topology
