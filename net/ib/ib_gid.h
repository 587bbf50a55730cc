// SPDX-License-Identifier: Apache-2.0
// Which GID a connection from a port uses, with NCCL's knobs: a fixed index (SIEVE_IB_GID_INDEX, or
// NCCL_IB_GID_INDEX), or an address family and range (SIEVE_IB_ADDR_FAMILY / SIEVE_IB_ADDR_RANGE, or
// NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE) that the automatic choice must keep to. Hosts with both
// IPv4 and IPv6 on a RoCE netdev list a GID per address and RoCE version; a cluster tuned for NCCL
// names the one its fabric routes, and Sieve must take the same one or its connections hang.
//
// The GID table changes under a running job (an address added, moved or removed: the kernel rewrites
// the entries and raises IBV_EVENT_GID_CHANGE), so the table is read again at each connect
// (refresh_gid), as NCCL's IB transport does, instead of trusting what discovery saw.
#pragma once

#include <cstdint>
#include <string>

#include "net/devices.h"
#include "net/ib/ib_devices.h"
#include "net/ib/ib_setup.h"
#include "net/ib/verbs_library.h"
#include "net/status.h"

namespace sieve::net::ib {

// "10.1.0.0/16" or "fd00::/8": an IPv4 range matches IPv4-mapped GIDs, an IPv6 range the others.
struct AddressRange {
  bool set = false;
  Family family = Family::kAny;
  uint8_t prefix[16] = {};  // IPv4: in the last four bytes, as in an IPv4-mapped GID
  int bits = 0;             // prefix length in the family's own address (0-32 or 0-128)
  std::string text;
};
// Empty text: no range. Error (naming `variable`) on anything else that is not address/length.
Status parse_address_range(const std::string& text, const char* variable, AddressRange* out);
bool in_range(const AddressRange& range, const ibv_gid& gid);

struct GidPolicy {
  int index = -1;                // >= 0: this entry on RoCE ports (never on InfiniBand ports)
  Family family = Family::kAny;  // Any: Sieve's order (IPv4-mapped RoCE v2 first)
  AddressRange range;
};

// The index a connection from `port` uses (its `gids` as last read). InfiniBand ports: 0, or 1
// where that entry carries a FLID (routed IB: ib_route.h), whatever the policy says (a GID index
// selects a RoCE address; an IB port's addresses are its LID and its port GID). RoCE: the policy's index when >= 0 and
// populated, else among the populated entries of the policy's family and range (every entry for Any and no range): RoCE
// v2 before v1, then IPv4-mapped, global IPv6, link-local. Errors name the port, the variables and the GID table.
Status select_gid(const IbPort& port, const GidPolicy& policy, int* index);

// Reads the GID table of `port` on `context` again and selects from it, into address->gid_index and
// address->gid: what a connection made now must use.
Status refresh_gid(const VerbsLibrary& verbs, ibv_context* context, const IbPort& port, const GidPolicy& policy,
                   PortAddress* address);

}  // namespace sieve::net::ib
