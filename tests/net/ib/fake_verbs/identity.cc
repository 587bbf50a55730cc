// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/identity.h"

#include <endian.h>

#include <cstdio>
#include <cstring>

namespace sieve::fake_verbs {
namespace {

constexpr uint8_t kGuidTag[3] = {0x02, 'f', 'v'};
constexpr uint32_t kIpv4Base = 0x0a000000;  // 10.0.0.0
constexpr uint32_t kPidBits = 22;

}  // namespace

uint64_t node_guid(NodeAddress node) {
  return (uint64_t{kGuidTag[0]} << 56) | (uint64_t{kGuidTag[1]} << 48) | (uint64_t{kGuidTag[2]} << 40) |
         (uint64_t{node.device_index & 0xff} << 32) | node.pid;
}

ibv_gid routable_gid(uint64_t subnet_prefix, uint16_t flid, NodeAddress node) {
  ibv_gid gid = guid_gid(subnet_prefix, node);
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0xc0;
  gid.raw[2] = 0;
  gid.raw[3] = 0;
  gid.raw[4] = static_cast<uint8_t>(flid >> 8);
  gid.raw[5] = static_cast<uint8_t>(flid);
  gid.raw[6] = static_cast<uint8_t>(subnet_prefix >> 8);
  gid.raw[7] = static_cast<uint8_t>(subnet_prefix);
  return gid;
}

uint16_t gid_flid(const ibv_gid& gid) { return static_cast<uint16_t>(gid.raw[4] << 8 | gid.raw[5]); }

ibv_gid guid_gid(uint64_t subnet_prefix, NodeAddress node) {
  ibv_gid gid{};
  gid.global.subnet_prefix = htobe64(subnet_prefix);
  gid.global.interface_id = htobe64(node_guid(node));
  return gid;
}

ibv_gid ipv4_mapped_gid(NodeAddress node) {
  ibv_gid gid{};
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  uint32_t ipv4 = htobe32(kIpv4Base + ((node.device_index << kPidBits) | node.pid));
  std::memcpy(&gid.raw[12], &ipv4, sizeof(ipv4));
  return gid;
}

bool is_link_local(const ibv_gid& gid) { return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80; }

bool decode_gid(const ibv_gid& gid, GidForm* form, NodeAddress* node) {
  static const uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kMappedPrefix, sizeof(kMappedPrefix)) == 0) {
    uint32_t ipv4;
    std::memcpy(&ipv4, &gid.raw[12], sizeof(ipv4));
    uint32_t offset = be32toh(ipv4) - kIpv4Base;
    if (be32toh(ipv4) < kIpv4Base || (offset >> kPidBits) >= kMaxDevices) return false;
    *form = GidForm::kIpv4Mapped;
    node->device_index = offset >> kPidBits;
    node->pid = offset & ((1u << kPidBits) - 1);
    return true;
  }
  uint64_t guid = be64toh(gid.global.interface_id);
  if (guid >> 40 != ((uint64_t{kGuidTag[0]} << 16) | (uint64_t{kGuidTag[1]} << 8) | kGuidTag[2])) return false;
  *form = GidForm::kGuidBased;
  node->device_index = (guid >> 32) & 0xff;
  node->pid = static_cast<uint32_t>(guid);
  return node->device_index < kMaxDevices;
}

std::string format_gid(const ibv_gid& gid) {
  char text[48];
  std::snprintf(text, sizeof(text), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                gid.raw[0], gid.raw[1], gid.raw[2], gid.raw[3], gid.raw[4], gid.raw[5], gid.raw[6], gid.raw[7],
                gid.raw[8], gid.raw[9], gid.raw[10], gid.raw[11], gid.raw[12], gid.raw[13], gid.raw[14], gid.raw[15]);
  return text;
}

std::string roce_endpoint_name(NodeAddress node) {
  return "fake-verbs/roce/" + std::to_string(node.pid) + "/" + std::to_string(node.device_index);
}

std::string ib_endpoint_name(uint16_t lid) { return "fake-verbs/ib/lid/" + std::to_string(lid); }

uint16_t first_lid_candidate(NodeAddress node) {
  uint32_t mixed = (node.pid * 2654435761u) ^ (node.device_index * 40503u);
  return static_cast<uint16_t>(1 + mixed % 0xbffe);
}

}  // namespace sieve::fake_verbs
