// SPDX-License-Identifier: Apache-2.0
// Routed InfiniBand, as NCCL's IB transport addresses it (net_ib connect.cc). Inside a subnet the
// switches deliver by LID. Between subnets a packet must carry a GRH (the routers forward by GID)
// and a DLID the local subnet delivers to a router: on fabrics routed by FLID ("foreign LID"), the
// destination port's FLID, which its routable GID carries:
//   | fec0 (10 bits fixed, 22 bits 0) | FLID (16 bits) | subnet (low 16 bits of the prefix) | GUID |
// NCCL compares subnets by those low 16 bits, takes the FLID from the peer's GID, falls back to the
// peer's LID (with a warning) when the GID has none, and on InfiniBand connects from the GID at
// NCCL_IB_ROUTABLE_FLID_GID_INDEX (1) when that entry carries a FLID.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "net/ib/ib_devices.h"

namespace sieve::net::ib {

constexpr int kRoutableFlidGidIndex = 1;

// The subnet as routers compare it: the low 16 bits of the GID's subnet prefix.
uint16_t ib_subnet_id(const ibv_gid& gid);
// The FLID a routable GID carries (bytes 4-5, big-endian); 0 for other GIDs.
uint16_t gid_flid(const ibv_gid& gid);
bool same_ib_subnet(const ibv_gid& a, const ibv_gid& b);
// The GID index an InfiniBand port connects from: kRoutableFlidGidIndex where that entry is
// populated and carries a FLID (peers in other subnets reach it only by that FLID), else 0.
int routable_gid_index(const IbPort& port);

// The DLID of packets from a port whose GID is `local` to a peer with `remote_lid` and `remote_gid`:
// the peer's LID in the same subnet; across subnets its FLID, or its LID where its GID carries no
// FLID (*no_flid set: a router without FLIDs, or a misconfigured one: worth a warning).
uint16_t destination_lid(const ibv_gid& local, uint16_t remote_lid, const ibv_gid& remote_gid, bool* no_flid);

}  // namespace sieve::net::ib
