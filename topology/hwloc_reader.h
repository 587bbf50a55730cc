// Reads NICs, GPUs and NUMA nodes through hwloc 2.x, from the live machine or from an XML
// topology (as written by `lstopo --of xml`).
#pragma once

#include <string>

#include "topology/machine.h"

namespace sieve::topology {

// Empty `xml_file` reads the live machine. Fills `machine` (source, nics, gpus, numa_nodes, cpus)
// and returns true; false with `error` set when hwloc cannot load the topology.
bool read_with_hwloc(const std::string& xml_file, Machine& machine, std::string& error);

}  // namespace sieve::topology
