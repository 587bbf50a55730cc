// SPDX-License-Identifier: Apache-2.0
// Which network interfaces Sieve uses, and what it reports about them. Kept in one place so the
// topology work can replace discovery (PCI paths, speeds) without touching the transport.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "net/status.h"
#include "topology/machine.h"

namespace sieve::net {

enum class Family { kAny, kIPv4, kIPv6 };

struct DeviceFilter {
  std::string ifname;  // NCCL syntax: "eth,ib" prefixes, "^docker,lo" excludes, "=eth0" exact names
  Family family = Family::kAny;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  std::string text() const;  // "10.0.0.1:1234", "[fe80::1%eth0]:1234" (port omitted when 0)
  uint16_t port() const;
  void set_port(uint16_t port);
};

struct Device {
  std::string name;       // interface name
  SocketAddress address;  // port 0
  // From topology/: sysfs path of the PCI function (its last component is the bus id, as NCCL's
  // topology search expects); empty for virtual interfaces, which NCCL then attaches to a CPU.
  std::string pci_path;
  int speed_mbps = kUnknownSpeedMbps;
  uint64_t guid = 0;  // equal for the ports of one multi-function card
  int port = 0;       // verbs: the device's port number, so two ports of one card are two NICs to NCCL
  int numa_node = -1;
  std::vector<int> cpus;    // CPUs local to the NIC: where its helper threads run when pinning
  uint16_t pci_vendor = 0;  // 0 when not on PCI or unknown (picks cloud NICs' stripe shapes)
  // What the transport, not the interface, decides (the plugin reports them to NCCL):
  bool dmabuf = false;         // register_memory accepts dma-bufs (verbs, where the port's probe says so)
  bool cuda_pointers = false;  // register_memory accepts CUDA device pointers (verbs, with nvidia-peermem loaded)
  // A registration made on one comm serves every comm of the device, and a registration inside a
  // live one is only a reference to it (verbs: NCCL's regIsGlobal).
  bool global_registration = false;
  int max_comms = 0;               // 0: bounded by file descriptors only (TCP); verbs: by queue pairs
  uint64_t max_message_bytes = 0;  // 0: no limit of the transport's own; verbs: the port's max_msg_sz too
  static constexpr int kUnknownSpeedMbps = 10000;  // virtio and down links report none
};

// One address of one interface, as getifaddrs reports it (input of the pure selection below).
struct InterfaceAddress {
  std::string name;
  SocketAddress address;
  bool up = false;
  bool loopback = false;
};

struct IfnameSpec {
  bool exclude = false;  // leading '^'
  bool exact = false;    // leading '='
  std::vector<std::string> names;
};

IfnameSpec parse_ifname_spec(const std::string& text);
bool ifname_matches(const IfnameSpec& spec, const std::string& name);
// Names of container bridges skipped by default (docker0, br-..., virbr0, ...).
bool is_container_bridge(const std::string& name);

// Pure selection: one address per interface (IPv4 first, then global IPv6, then link-local IPv6),
// in the order given. Without an ifname, lo and container bridges are skipped unless nothing else is up.
std::vector<Device> select_devices(const std::vector<InterfaceAddress>& candidates, const DeviceFilter& filter);

// The usable interfaces (getifaddrs + selection), placed on `machine`. Error when nothing is usable.
Status discover_devices(const DeviceFilter& filter, const topology::Machine& machine, std::vector<Device>* out);

// Fills PCI path, speed, guid, NUMA node and local CPUs from the topology's NIC of the same name;
// a device the topology does not know (a pinned file from another host) keeps the defaults.
void place_devices(const topology::Machine& machine, std::vector<Device>& devices);

}  // namespace sieve::net
