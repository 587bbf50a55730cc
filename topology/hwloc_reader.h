// SPDX-License-Identifier: Apache-2.0
// Reads NICs, GPUs and NUMA nodes through hwloc 2.x, from the live machine or from an XML
// topology (as written by `lstopo --of xml`).
#pragma once

#include <cstdint>
#include <string>

#include "topology/machine.h"

namespace sieve::topology {

// Empty `xml_file` reads the live machine. Fills `machine` (source, nics, gpus, numa_nodes, cpus)
// and returns true; false with `error` set when hwloc cannot load the topology.
bool read_with_hwloc(const std::string& xml_file, Machine& machine, std::string& error);

// SIEVE_TOPO_FILE is read whole, so it is bounded: a regular file (not /dev/zero, not a FIFO) of at
// most this size. lstopo's XML of a large 8-GPU node is well under 1 MiB.
constexpr uint64_t kMaxTopologyFileBytes = uint64_t{16} << 20;
// "" with *contents filled, else why the file is refused.
std::string read_topology_file(const std::string& path, std::string* contents);
// An XML topology from memory (`name` for messages): what read_with_hwloc does with a file's bytes.
bool read_with_hwloc_xml(const std::string& name, const std::string& xml, Machine& machine, std::string& error);

}  // namespace sieve::topology
