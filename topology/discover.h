// Entry point of topology/: one call that describes the machine the plugin runs on (or the one an
// hwloc XML file describes), with notes for the caller to log.
#pragma once

#include <string>

#include "topology/machine.h"

namespace sieve::topology {

struct Options {
  // SIEVE_TOPO_FILE: read this hwloc XML topology instead of the live machine. Nothing of the live
  // machine is read then (no sysfs, no CUDA), so a pinned topology gives the same answer everywhere.
  std::string xml_file;
  std::string sysfs_root = "/sys";  // live machine only; tests point it at a fake tree
  bool use_hwloc = true;            // false reads sysfs alone (the fallback path, for tests)
  bool query_cuda = true;           // ask the CUDA driver for GPU ordinals when GPUs are present
};

struct Discovery {
  bool ok = false;
  std::string error;  // why not, when !ok (unreadable or invalid topology file)
  Machine machine;
};

// Never throws, never logs. Fails only for a bad topology file: the live machine always yields a
// Machine, from sysfs when hwloc cannot help (machine.notes says so).
Discovery discover(const Options& options);

}  // namespace sieve::topology
