// SPDX-License-Identifier: Apache-2.0
// Addresses of the fake devices. Two processes on one machine are two "nodes", so every address is
// derived from the process id and the device's index in that process's registry:
//   node GUID          02:66:76:<index>:<pid, 4 bytes big-endian>   ("fv" = fake verbs)
//   GUID-based GID     <subnet prefix>:<GUID>   (RoCE v1 at index 0, prefix fe80::; the IB port GID at
//                                               index 0, prefix the port's subnet, fe80:: by default)
//   RoCE v2 GID        ::ffff:a.b.c.d with a.b.c.d = 10.0.0.0 + (index << 22 | pid)
//   IB LID             the first free value from a pid-derived start, claimed by binding the device
//                      endpoint named after it (so no two live processes hold the same LID)
// Each port of a device has its own address index (a two-port device takes two), so every port has
// its own GIDs, LID and endpoint; the device's node GUID is its first port's.
// Decoding a GID gives back the (pid, index) that names the remote port's endpoint socket.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace sieve::fake_verbs {

struct NodeAddress {
  uint32_t pid = 0;
  uint32_t device_index = 0;
};

// pid < 2^22 (Linux's PID_MAX_LIMIT) and index < kMaxDevices keep every GID distinct.
constexpr uint32_t kMaxDevices = 64;

enum class GidForm { kGuidBased, kIpv4Mapped };

uint64_t node_guid(NodeAddress node);  // host order
constexpr uint64_t kLinkLocalPrefix = 0xfe80000000000000ull;
ibv_gid guid_gid(uint64_t subnet_prefix, NodeAddress node);
ibv_gid ipv4_mapped_gid(NodeAddress node);
// Routed IB's routable GID: fec0:0000:<flid>:<low 16 bits of subnet_prefix>:<GUID>.
ibv_gid routable_gid(uint64_t subnet_prefix, uint16_t flid, NodeAddress node);
// The FLID a routable GID carries (bytes 4-5), 0 for any other GID.
uint16_t gid_flid(const ibv_gid& gid);
// A global IPv6 address of the port's netdev (RoCE v2): fd66:7600::/64 and the GUID. Decodes as
// GUID-based.
constexpr uint64_t kIpv6GlobalPrefix = 0xfd66760000000000ull;
bool is_link_local(const ibv_gid& gid);

// False when `gid` is not one the fake hands out (any subnet prefix: the GUID names the port).
bool decode_gid(const ibv_gid& gid, GidForm* form, NodeAddress* node);

std::string format_gid(const ibv_gid& gid);

// Names of device endpoints (see endpoint.h for where they live).
std::string roce_endpoint_name(NodeAddress node);
std::string ib_endpoint_name(uint16_t lid);

// Where a LID search starts for this node (unicast LIDs are 1..0xbfff).
uint16_t first_lid_candidate(NodeAddress node);

}  // namespace sieve::fake_verbs
