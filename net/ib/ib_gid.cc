// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_gid.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "net/ib/ib_route.h"

namespace sieve::net::ib {

namespace {

bool ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof(prefix)) == 0;
}

bool link_local(const ibv_gid& gid) { return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80; }

// NCCL's family of a GID: IPv4-mapped is IPv4, everything else IPv6 (link-local included).
Family family_of(const ibv_gid& gid) { return ipv4_mapped(gid) ? Family::kIPv4 : Family::kIPv6; }

const char* family_text(Family f) { return f == Family::kIPv4 ? "ipv4" : f == Family::kIPv6 ? "ipv6" : "any"; }

const char* type_text(GidType t) {
  return t == GidType::kRoCEv2 ? "RoCE v2" : t == GidType::kRoCEv1 ? "RoCE v1" : "IB";
}

std::string table_text(const IbPort& port) {
  if (port.gids.empty()) return "no populated entry";
  std::string text;
  for (const GidEntry& e : port.gids)
    text += (text.empty() ? "" : ", ") + std::to_string(e.index) + " " + e.text() + " " + type_text(e.type);
  return text;
}

// Lower is better: RoCE v2 (routable, what ECN-based congestion control expects) before v1, and
// within a version IPv4-mapped, then global IPv6, then link-local (not routed beyond the subnet).
int rank(const GidEntry& e) {
  const int version = e.type == GidType::kRoCEv2 ? 0 : e.type == GidType::kRoCEv1 ? 3 : 6;
  const int address = ipv4_mapped(e.gid) ? 0 : !link_local(e.gid) ? 1 : 2;
  return version + address;
}

}  // namespace

Status parse_address_range(const std::string& text, const char* variable, AddressRange* out) {
  *out = AddressRange{};
  if (text.empty()) return ok_status();
  const auto bad = [&](const std::string& why) {
    return error(Code::kInvalidArgument, std::string(variable) + "=" + text + ": " + why +
                                             " (an address range is address/length, e.g. 10.1.0.0/16 or fd00::/8)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad("no /length");
  const std::string address = text.substr(0, slash);
  const std::string length = text.substr(slash + 1);
  char* end = nullptr;
  errno = 0;
  const long bits = std::strtol(length.c_str(), &end, 10);
  if (length.empty() || *end != '\0' || errno != 0 || bits < 0) return bad("the length is not a number");
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    if (bits > 32) return bad("an IPv4 prefix is at most 32 bits");
    out->family = Family::kIPv4;
    out->prefix[10] = out->prefix[11] = 0xff;
    std::memcpy(out->prefix + 12, &v4, 4);
    out->bits = static_cast<int>(bits);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (bits > 128) return bad("an IPv6 prefix is at most 128 bits");
    out->family = Family::kIPv6;
    std::memcpy(out->prefix, &v6, 16);
    out->bits = static_cast<int>(bits);
  } else {
    return bad("\"" + address + "\" is not an IPv4 or IPv6 address");
  }
  out->set = true;
  out->text = text;
  return ok_status();
}

bool in_range(const AddressRange& range, const ibv_gid& gid) {
  if (!range.set) return true;
  if (family_of(gid) != range.family) return false;
  const int first = range.family == Family::kIPv4 ? 12 : 0;  // an IPv4 prefix counts from its own address
  int bits = range.bits;
  for (int i = first; i < 16 && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((gid.raw[i] & mask) != (range.prefix[i] & mask)) return false;
  }
  return true;
}

Status select_gid(const IbPort& port, const GidPolicy& policy, int* index) {
  // InfiniBand: the port GID at index 0 (its LID routes inside the subnet), or on a routed fabric
  // the routable GID at index 1, which carries the FLID peers in other subnets need (ib_route.h,
  // NCCL_IB_ROUTABLE_FLID_GID_INDEX's default). SIEVE_IB_GID_INDEX and the address family and range
  // choose among RoCE addresses only: a host with IB and RoCE ports sets them for its RoCE ports
  // and must keep its IB ports.
  if (port.link_layer == LinkLayer::kInfiniBand) {
    *index = routable_gid_index(port);
    return ok_status();
  }
  if (policy.index >= 0) {
    for (const GidEntry& e : port.gids)
      if (e.index == policy.index) {
        *index = policy.index;
        return ok_status();
      }
    return error(Code::kInvalidArgument, "GID index " + std::to_string(policy.index) +
                                             " (SIEVE_IB_GID_INDEX, or NCCL_IB_GID_INDEX) names an empty entry of " +
                                             port.name() + " (" + table_text(port) + ")");
  }
  // A range implies its family; a family set beside a range of the other one matches nothing.
  const Family family = policy.family != Family::kAny ? policy.family : policy.range.family;
  const GidEntry* best = nullptr;
  for (const GidEntry& e : port.gids) {
    if (family != Family::kAny && family_of(e.gid) != family) continue;
    // NCCL never picks a link-local address when a family is asked for: not routable.
    if (family != Family::kAny && link_local(e.gid)) continue;
    if (!in_range(policy.range, e.gid)) continue;
    if (!best || rank(e) < rank(*best)) best = &e;
  }
  if (best) {
    *index = best->index;
    return ok_status();
  }
  if (port.gids.empty())
    return error(Code::kSystemError, port.name() + " has no populated GID entry (is its netdev up with an address?)");
  return error(Code::kInvalidArgument,
               "no GID of " + port.name() + " is a routable " + family_text(family) + " address" +
                   (policy.range.set ? " in " + policy.range.text : std::string()) +
                   " (SIEVE_IB_ADDR_FAMILY / SIEVE_IB_ADDR_RANGE, or NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE); "
                   "its GIDs: " +
                   table_text(port));
}

Status refresh_gid(const VerbsLibrary& verbs, ibv_context* context, const IbPort& port, const GidPolicy& policy,
                   PortAddress* address) {
  IbPort now = port;
  read_gid_table(verbs, context, port.ibdev_path, port.port, port.gid_table_length, &now);
  int index = 0;
  Status st = select_gid(now, policy, &index);
  if (!st.ok()) return st;
  address->gid_index = index;
  address->gid = ibv_gid{};  // an InfiniBand port without a populated entry 0 keeps zeros
  for (const GidEntry& g : now.gids)
    if (g.index == index) address->gid = g.gid;
  return ok_status();
}

}  // namespace sieve::net::ib
