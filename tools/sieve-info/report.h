// SPDX-License-Identifier: Apache-2.0
// What sieve-info reports, gathered once and printed as text or JSON: the plugin library and the
// ABI versions it exports, the devices it offers NCCL, the machine as topology/ sees it (with the
// IP addresses of each interface), and the effective SIEVE_* configuration.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "net/transport.h"
#if SIEVE_HAVE_VERBS  // a TCP-only build (CMake's SIEVE_VERBS) has no net/ib/
#include "net/ib/ib_devices.h"
#endif
#include "plugin/config.h"
#include "plugin/net/nccl_fallbacks.h"
#include "tools/nccl_emulator/plugin_loader.h"
#include "tools/sieve-info/copies.h"
#include "topology/discover.h"

namespace sieve::info {

struct PluginReport {
  std::string library;            // the file loaded (or tried): a path, or a name the loader resolves
  std::string library_file;       // the file the loader mapped for it ("" when it did not load)
  std::string error;              // why it could not be loaded; "" when it was
  std::vector<int> abi_versions;  // ncclNetPlugin_vN symbols found, newest first
  int used_version = 0;           // the one driven to list devices
  std::string name;               // the table's name field
  // sieve_capabilities() of the loaded library (SIEVE_CAP_* bits); false when it did not load or
  // predates the call.
  bool capabilities_known = false;
  uint32_t capabilities = 0;
  std::vector<tools::NetDeviceInfo> devices;
  // Per device: the data sockets and helper threads a connection over it gets (SIEVE_NSOCKS and
  // SIEVE_NTHREADS, or what auto makes of the device's speed).
  std::vector<net::StripeShape> shapes;
  // Per device: the NIC's link speed is unknown (VMs, down links), so speed_mbps is the speed the
  // plugin assumes and tells NCCL, not a measurement.
  std::vector<bool> speed_assumed;
  // The topology the plugin placed its devices with: SIEVE_TOPO_FILE, or "" for this machine. The
  // devices are always this machine's interfaces, whatever --topo describes.
  std::string topology_file;
  std::string devices_error;  // init/devices/getProperties failure
};

// RDMA devices as the verbs transport sees them (libibverbs loaded the way the plugin loads it).
struct RdmaReport {
  bool built = SIEVE_HAVE_VERBS != 0;  // false in a TCP-only build: no ports, `error` says why
  std::string library;                 // the libibverbs file loaded; "" when none could be
  std::string error;                   // why verbs are unavailable, or why the ports could not be listed
#if SIEVE_HAVE_VERBS
  std::vector<net::ib::IbPort> ports;  // every port, active or not
#endif
  std::vector<bool> selected;      // per port: active and chosen by SIEVE_IB_HCA
  std::vector<int> gid_index;      // per port: the GID a connection would use (-1: none)
  std::vector<std::string> notes;  // devices skipped, and why
};

struct Report {
  std::string version;
  bool plugin_skipped = false;
  PluginReport plugin;
  std::string topo_file;  // "" = the live machine
  topology::Discovery topology;
  std::map<std::string, std::vector<std::string>> addresses;  // interface -> IPv4/IPv6 addresses
  RdmaReport rdma;
  // Every copy of the library the loader could find, and the one NCCL's by-name load and
  // LD_PRELOAD would take (not gathered with --no-plugin).
  CopiesReport copies;
  // The transport the plugin would carry data with, "ib" or "tcp", and why (SIEVE_TRANSPORT, and
  // for auto what the RDMA report found).
  std::string transport;
  std::string transport_why;
  std::vector<config::Effective> config;
  // The verbs settings NCCL's IB transport has too, with the variable that decided each: the
  // SIEVE_IB_* one, its NCCL_IB_* twin, or the default.
  std::vector<plugin::SharedSetting> ib_settings;
  std::vector<std::string> config_diagnostics;
  // Everything that would make a job run other than asked, one line each, naming the cause: the
  // plugin cannot be loaded or started or offers no device, the topology cannot be read, a SIEVE_*
  // variable is unknown, its value was refused, or only the transport not in use reads it.
  // sieve-info exits 1 when this is not empty.
  std::vector<std::string> problems;
};

struct ReportOptions {
  std::string topo_file;    // --topo, else SIEVE_TOPO_FILE
  std::string plugin_path;  // --plugin, else found next to sieve-info
  bool skip_plugin = false;
  std::vector<std::string> required;  // --require: capability names the library must have
};

Report gather(const ReportOptions& options);

// The value to show for a setting: secrets (SIEVE_*_TOKEN) are never printed, only whether set.
std::string shown_value(const config::Effective& entry);
// The value in force in its own spelling: a Bool's on or off, a Choice's choice (SIEVE_TRACK=yes is
// on, as the registry reads it); other kinds as written.
std::string effective_text(const config::Effective& entry);
// shown_value, with the value in force first where it was written otherwise ("on (given as yes)").
std::string shown_effective(const config::Effective& entry);

// The capabilities sieve_capabilities() reports, by the names --require and the output use, with
// what a library without each one lacks.
struct Capability {
  const char* name;
  uint32_t bit;
  const char* without;
};
const std::vector<Capability>& capabilities();

// Columns of the GPU x NIC matrix: the NICs a GPU could be paired with (real netdevs; RDMA
// devices appear through their paired netdev, or on their own where they have none).
std::vector<size_t> matrix_columns(const topology::Machine& machine);

}  // namespace sieve::info
