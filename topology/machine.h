// SPDX-License-Identifier: Apache-2.0
// What topology/ reports about a machine: its NICs, GPUs and NUMA nodes, each PCI device with the
// chain of bridges above it so GPU<->NIC distances can be classified after the hwloc handle is gone.
// Plain data: copyable, no hwloc types, safe to keep for the life of the plugin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sieve::topology {

// Where a device sits. Every field may be unknown: a virtual interface has no PCI function, a VM
// reports no NUMA node. Unknown is "" for text, -1 for numbers, empty for lists.
struct Placement {
  std::string pci_bus_id;  // "0000:03:00.0" of the PCI function, "" when not on PCI
  // Sysfs path of the PCI function, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0: what
  // NCCL expects in a net device's pciPath (its last component must be the bus id).
  std::string pci_path;
  // Ancestors from the root down, the device excluded: "pci0000:00" for the host bridge, then the
  // bus id of every PCI bridge (root port, switch ports). Empty when not on PCI.
  std::vector<std::string> pci_upstream;
  int numa_node = -1;     // OS index of the NUMA node the device is local to
  std::vector<int> cpus;  // CPUs local to the device (OS indices), where helper threads belong
  uint16_t vendor_id = 0, device_id = 0, class_id = 0;
};

enum class NicKind { kNetdev, kRdma };

struct Nic : Placement {
  std::string name;  // "eth0", "ib0" (netdev) or "mlx5_0" (RDMA device)
  NicKind kind = NicKind::kNetdev;
  std::string sysfs_device_path;  // realpath of /sys/class/net/<name>/device (live machine only)
  std::string address;            // hardware address as the OS prints it
  std::string paired;             // the other kind's device on the same PCI function ("ib0" <-> "mlx5_0")
  int64_t speed_mbps = 0;         // link speed, 0 when unknown (down link, topology file, VM)
  // Equal for all functions (ports) of one multi-function card, so NCCL can merge them; derived
  // from the PCI domain:bus:device, or from the name for devices without PCI.
  uint64_t guid = 0;
  bool is_virtual = false;  // no device behind it (lo, veth, bridges, ifb)
};

struct Gpu : Placement {
  int cuda_index = -1;  // CUDA device ordinal when known (CUDA present, or named in the topology)
};

struct NumaNode {
  int os_index = -1;
  std::vector<int> cpus;
  uint64_t memory_bytes = 0;
};

enum class Source { kLiveHwloc, kTopologyFile, kSysfs };

struct Machine {
  Source source = Source::kLiveHwloc;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  std::vector<NumaNode> numa_nodes;
  std::vector<int> cpus;  // every CPU of the machine
  // Things the caller should log (topology/ never logs): fallbacks taken, information missing.
  std::vector<std::string> notes;

  // nullptr when no NIC has that name.
  const Nic* find_nic(const std::string& name) const;
  size_t pci_device_count() const;  // NICs and GPUs with a PCI bus id
};

const char* source_name(Source source);
const char* nic_kind_name(NicKind kind);

// Distance between two devices, closest first, as `nvidia-smi topo -m` names it:
//   PIX  same PCIe switch (at most one switch between them)
//   PXB  several PCIe switches, without the host bridge
//   PHB  through the PCIe host bridge they share (the CPU's root complex)
//   NODE different host bridges of one NUMA node
//   SYS  across NUMA nodes (the socket interconnect), or unknown placement on a multi-node machine
enum class PathClass { kPIX = 0, kPXB = 1, kPHB = 2, kNODE = 3, kSYS = 4 };

const char* path_class_name(PathClass path);
PathClass classify(const Placement& a, const Placement& b);

// Index into machine.nics of the NIC of `kind` closest to GPU `gpu_index`: the smallest class,
// then the fastest link, then the first listed. Virtual NICs are chosen only when nothing else
// exists. -1 when there is no NIC of that kind or no such GPU.
int best_nic_for(const Machine& machine, size_t gpu_index, NicKind kind = NicKind::kNetdev);

// "0-3,8,10-11" for {0,1,2,3,8,10,11}; "" for none.
std::string cpu_list_text(const std::vector<int>& cpus);
// Parses the Linux cpulist format (sysfs local_cpulist). False with `error` set on bad text.
bool parse_cpu_list(const std::string& text, std::vector<int>& cpus, std::string& error);

// One line for logs: "eth0 (netdev) pci 0000:00:03.0 numa 0 cpus 0-1 speed 10000 Mb/s".
std::string summary(const Nic& nic);

// Guid of a PCI function's card (domain:bus:device, function ignored), or of a name.
uint64_t card_guid(const std::string& pci_bus_id, const std::string& name);

}  // namespace sieve::topology
