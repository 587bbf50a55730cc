// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_route.h"

namespace sieve::net::ib {

uint16_t ib_subnet_id(const ibv_gid& gid) { return static_cast<uint16_t>(gid.raw[6] << 8 | gid.raw[7]); }

uint16_t gid_flid(const ibv_gid& gid) { return static_cast<uint16_t>(gid.raw[4] << 8 | gid.raw[5]); }

bool same_ib_subnet(const ibv_gid& a, const ibv_gid& b) { return ib_subnet_id(a) == ib_subnet_id(b); }

int routable_gid_index(const IbPort& port) {
  for (const GidEntry& e : port.gids)
    if (e.index == kRoutableFlidGidIndex && gid_flid(e.gid) != 0) return kRoutableFlidGidIndex;
  return 0;
}

uint16_t destination_lid(const ibv_gid& local, uint16_t remote_lid, const ibv_gid& remote_gid, bool* no_flid) {
  *no_flid = false;
  if (same_ib_subnet(local, remote_gid)) return remote_lid;
  const uint16_t flid = gid_flid(remote_gid);
  if (flid != 0) return flid;
  *no_flid = true;
  return remote_lid;
}

}  // namespace sieve::net::ib
