// SPDX-License-Identifier: Apache-2.0
// The fake devices a process sees, from FAKE_VERBS_DEVICES (read at every ibv_get_device_list):
// semicolon-separated `name:link:netdev:gbps[:options]`, link `roce`, `ib`, `efa` or `iwarp`, options
// a comma-separated list that makes the ports behave as some real hardware does (below).
// Unset: one RoCE device `fake0:roce:lo:100`. Set but empty: no devices. (Deliberately not a SIEVE_*
// name: Sieve's registry reports unknown SIEVE_* variables.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sieve::fake_verbs {

// roce and ib are what the transport drives. efa (an AWS EFA port: link layer and transport type
// unspecified, no RC queue pairs) and iwarp (Ethernet link layer, iWARP transport: RC queue pairs
// connect only through rdma_cm) are ports it must leave alone.
enum class LinkLayer : uint32_t { kRoce = 1, kInfiniband = 2, kEfa = 3, kIwarp = 4 };

constexpr int kMaxPorts = 4;

struct DeviceSpec {
  std::string name;
  LinkLayer link = LinkLayer::kRoce;
  std::string netdev;  // RoCE and iWARP: must exist (its ifindex is the GIDs' ndev_ifindex); IB, EFA: may be empty
  int gbps = 0;
  unsigned ifindex = 0;      // if_nametoindex(netdev) where there is one, else 0
  uint8_t active_speed = 0;  // IB encoding (ibv_port_attr::active_speed)
  uint8_t active_width = 0;  // IB encoding (ibv_port_attr::active_width)

  // Options. Every port of a device has the same link layer, MTU, P_Key table and subnet.
  int ports = 1;                        // ports=N (1..kMaxPorts)
  uint32_t down_ports = 0;              // down=P (repeatable): port P starts DOWN; bit P-1
  int active_mtu = 4096;                // mtu=256|512|1024|2048|4096 (max_mtu stays 4096)
  std::vector<uint16_t> pkeys{0xffff};  // pkey=HEX (repeatable): the P_Key table, in order
  bool grh_required = false;            // grh_required: IBV_QPF_GRH_REQUIRED (SR-IOV VFs, cloud IB)
  bool ipv6 = false;  // ipv6 (RoCE): the netdev has a global IPv6 address too, a RoCE v2 GID at index 2
  uint64_t subnet_prefix = 0xfe80000000000000ull;  // subnet=HEX (16 digits): the IB subnet prefix
  bool flid = false;  // flid: routed IB; each port has a FLID and a routable GID at index 1 (see Port::flid)
  uint64_t max_msg_sz = 1ull << 30;  // max_msg_sz=BYTES: the port's limit per message (mlx5: 1 GiB)
  std::string options;               // as written, for key()

  bool port_down(int port) const { return (down_ports >> (port - 1)) & 1u; }
  // The registry key: the same entry in a later list is the same device (same GIDs, same LID).
  std::string key() const;
};

// Parses the variable's value (nullptr = unset). On bad input returns false and a message that
// names FAKE_VERBS_DEVICES and the offending entry.
bool parse_device_specs(const char* value, std::vector<DeviceSpec>* out, std::string* error);

// The link rate as real hardware encodes it: lanes (active_width) times a per-lane speed
// (active_speed). False for a rate no real port reports.
bool encode_link_rate(int gbps, uint8_t* active_speed, uint8_t* active_width);

}  // namespace sieve::fake_verbs
