// SPDX-License-Identifier: Apache-2.0
#include "topology/discover.h"

#include "topology/cuda_probe.h"
#include "topology/hwloc_reader.h"
#include "topology/sysfs_reader.h"

namespace sieve::topology {

namespace {

bool any_on_pci(const std::vector<Nic>& nics) {
  for (const auto& nic : nics)
    if (!nic.pci_bus_id.empty()) return true;
  return false;
}

// Adds to hwloc's NICs what only sysfs knows (speed, the device link) and the interfaces hwloc
// leaves out (virtual ones: lo, veth, bridges), which the transport may still be asked to use.
void merge_sysfs_nics(std::vector<Nic>& nics, const std::vector<Nic>& from_sysfs) {
  for (const auto& extra : from_sysfs) {
    Nic* known = nullptr;
    for (auto& nic : nics)
      if (nic.name == extra.name && nic.kind == extra.kind) known = &nic;
    if (known == nullptr) {
      nics.push_back(extra);
      continue;
    }
    known->sysfs_device_path = extra.sysfs_device_path;
    known->speed_mbps = extra.speed_mbps;
    if (!extra.pci_path.empty()) known->pci_path = extra.pci_path;
    if (known->address.empty()) known->address = extra.address;
  }
}

// A device whose NUMA node is unknown on a one-node machine is on that node; a device without
// local CPUs may use its node's CPUs, or the machine's.
template <typename Device> void resolve_locality(const Machine& machine, Device& device) {
  if (device.numa_node < 0 && machine.numa_nodes.size() == 1) device.numa_node = machine.numa_nodes[0].os_index;
  if (!device.cpus.empty()) return;
  for (const auto& node : machine.numa_nodes)
    if (node.os_index == device.numa_node) device.cpus = node.cpus;
  if (device.cpus.empty()) device.cpus = machine.cpus;
}

void resolve_unknown_locality(Machine& machine) {
  for (auto& nic : machine.nics) resolve_locality(machine, nic);
  for (auto& gpu : machine.gpus) resolve_locality(machine, gpu);
}

Discovery discover_file(const Options& options) {
  Discovery result;
  std::string error;
  if (!read_with_hwloc(options.xml_file, result.machine, error)) {
    result.error = error;
    return result;
  }
  if (result.machine.pci_device_count() == 0)
    result.machine.notes.push_back("topology file '" + options.xml_file +
                                   "' shows no NIC or GPU on PCI: devices are placed by NUMA node only");
  resolve_unknown_locality(result.machine);
  result.ok = true;
  return result;
}

Discovery discover_live(const Options& options) {
  Discovery result;
  Machine from_hwloc;
  std::string error;
  const bool with_hwloc = options.use_hwloc && read_with_hwloc("", from_hwloc, error);
  if (!options.use_hwloc) error = "hwloc not used";
  result.machine = combine_live_views(with_hwloc, std::move(from_hwloc), error, read_sysfs_nics(options.sysfs_root),
                                      options.sysfs_root);
  if (options.query_cuda) {
    const std::string note = assign_cuda_indices(result.machine.gpus);
    if (!note.empty()) result.machine.notes.push_back(note);
  }
  result.ok = true;
  return result;
}

}  // namespace

Machine combine_live_views(bool hwloc_loaded, Machine hwloc_view, const std::string& hwloc_error,
                           std::vector<Nic> sysfs_nics, const std::string& sysfs_root) {
  Machine machine = std::move(hwloc_view);
  if (!hwloc_loaded) {
    machine = Machine{};
    machine.source = Source::kSysfs;
    machine.notes.push_back(hwloc_error + "; using sysfs");
    if (!read_sysfs_numa(sysfs_root, machine.numa_nodes, machine.cpus))
      machine.notes.push_back("sysfs lists no online CPUs under " + sysfs_root + ": CPU placement unknown");
    machine.nics = std::move(sysfs_nics);
  } else if (!any_on_pci(machine.nics) && any_on_pci(sysfs_nics)) {
    machine.source = Source::kSysfs;
    machine.notes.push_back("hwloc sees no PCI network devices (VM or container?); NIC placement read from sysfs");
    machine.nics = std::move(sysfs_nics);
  } else {
    merge_sysfs_nics(machine.nics, sysfs_nics);
  }
  resolve_unknown_locality(machine);
  return machine;
}

Discovery discover(const Options& options) {
  return options.xml_file.empty() ? discover_live(options) : discover_file(options);
}

}  // namespace sieve::topology
