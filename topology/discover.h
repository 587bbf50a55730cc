// SPDX-License-Identifier: Apache-2.0
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

// The live-machine rules on given views, exposed so tests can feed them any combination: hwloc's
// view (`hwloc_loaded`, else `hwloc_error`), the NICs sysfs lists, and sysfs for NUMA when hwloc
// failed. Keeps hwloc's NICs and adds sysfs's speed, device links and virtual interfaces; takes
// sysfs's NICs instead where hwloc places none on PCI but sysfs does; notes every fallback.
Machine combine_live_views(bool hwloc_loaded, Machine hwloc_view, const std::string& hwloc_error,
                           std::vector<Nic> sysfs_nics, const std::string& sysfs_root);

}  // namespace sieve::topology
