// SPDX-License-Identifier: Apache-2.0
// Reads NICs, NUMA nodes and CPUs from Linux sysfs: the fallback where hwloc sees no PCI devices
// (VMs, containers) and the source of what hwloc does not record (link speed, virtual interfaces).
#pragma once

#include <string>
#include <vector>

#include "topology/machine.h"

namespace sieve::topology {

// Every interface of <root>/class/net and RDMA device of <root>/class/infiniband, with its PCI
// function (walking up from its device to the first ancestor on the pci bus), NUMA node, local CPUs,
// speed and address. `root` is "/sys" on a live machine; tests pass a fake tree.
std::vector<Nic> read_sysfs_nics(const std::string& root);

// NUMA nodes from <root>/devices/system/node and the online CPUs; false when sysfs lacks them.
bool read_sysfs_numa(const std::string& root, std::vector<NumaNode>& nodes, std::vector<int>& cpus);

}  // namespace sieve::topology
