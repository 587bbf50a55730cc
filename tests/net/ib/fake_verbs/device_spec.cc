// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/device_spec.h"

#include <net/if.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace sieve::fake_verbs {
namespace {

// IB encodings (ibv_port_attr): width 1 = 1x, 2 = 4x, 4 = 8x; speed 2 = DDR (5 Gb/s nominal per lane),
// 4 = QDR (10), 16 = FDR (14), 32 = EDR (25), 64 = HDR (50), 128 = NDR (100). Ethernet rates map as
// mlx5 reports them for RoCE ports.
struct LinkRate {
  int gbps;
  uint8_t speed;
  uint8_t width;
};
constexpr LinkRate kLinkRates[] = {
    {10, 4, 1},     // QDR x1
    {20, 2, 2},     // DDR x4
    {25, 32, 1},    // EDR x1
    {40, 4, 2},     // QDR x4
    {50, 64, 1},    // HDR x1
    {56, 16, 2},    // FDR x4
    {100, 32, 2},   // EDR x4
    {200, 64, 2},   // HDR x4
    {400, 128, 2},  // NDR x4
    {800, 128, 4},  // NDR x8
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

constexpr const char* kOptionsHelp =
    "options: ports=N, down=P, mtu=BYTES, pkey=HEX, grh_required, ipv6, subnet=HEX16, flid, max_msg_sz=BYTES";

std::string supported_rates() {
  std::string list;
  for (const LinkRate& rate : kLinkRates) list += (list.empty() ? "" : ", ") + std::to_string(rate.gbps);
  return list;
}

bool parse_hex(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 16) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 16);
  if (*end != '\0' || errno != 0 || value > max) return false;
  *out = value;
  return true;
}

bool parse_option(const std::string& option, DeviceSpec* spec, std::string* why) {
  const size_t equals = option.find('=');
  const std::string key = option.substr(0, equals);
  const std::string value = equals == std::string::npos ? "" : option.substr(equals + 1);
  char* end = nullptr;
  if (key == "flid" && equals == std::string::npos) {
    spec->flid = true;
    return true;
  }
  if (key == "grh_required" && equals == std::string::npos) {
    spec->grh_required = true;
    return true;
  }
  if (key == "ipv6" && equals == std::string::npos) {
    spec->ipv6 = true;
    return true;
  }
  if (key == "ports" || key == "down") {
    const long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n < 1 || n > kMaxPorts) {
      *why = key + "=" + value + ": a port number 1.." + std::to_string(kMaxPorts);
      return false;
    }
    if (key == "ports") spec->ports = static_cast<int>(n);
    else spec->down_ports |= 1u << (n - 1);
    return true;
  }
  if (key == "mtu") {
    const long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || (n != 256 && n != 512 && n != 1024 && n != 2048 && n != 4096)) {
      *why = "mtu=" + value + ": one of 256, 512, 1024, 2048, 4096";
      return false;
    }
    spec->active_mtu = static_cast<int>(n);
    return true;
  }
  if (key == "max_msg_sz") {
    const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n == 0 || n > 0xffffffffull) {
      *why = "max_msg_sz=" + value + ": bytes, 1..2^32-1 (ibv_port_attr::max_msg_sz is 32 bits)";
      return false;
    }
    spec->max_msg_sz = n;
    return true;
  }
  uint64_t hex = 0;
  if (key == "pkey") {
    if (!parse_hex(value, 0xffff, &hex) || (hex & 0x7fff) == 0) {
      *why = "pkey=" + value + ": a P_Key in hex, its low 15 bits not 0";
      return false;
    }
    spec->pkeys.push_back(static_cast<uint16_t>(hex));
    return true;
  }
  if (key == "subnet") {
    if (value.size() != 16 || !parse_hex(value, ~0ull, &hex)) {
      *why = "subnet=" + value + ": the subnet prefix, 16 hex digits";
      return false;
    }
    spec->subnet_prefix = hex;
    return true;
  }
  *why = "unknown option '" + option + "' (" + kOptionsHelp + ")";
  return false;
}

bool parse_entry(const std::string& entry, DeviceSpec* spec, std::string* why) {
  std::vector<std::string> fields = split(entry, ':');
  if (fields.size() != 4 && fields.size() != 5) {
    *why = "expected name:link:netdev:gbps[:options]";
    return false;
  }
  spec->name = fields[0];
  if (spec->name.empty() || spec->name.size() >= 64) {
    *why = "the name must have 1 to 63 characters";
    return false;
  }
  if (fields[1] == "roce") {
    spec->link = LinkLayer::kRoce;
  } else if (fields[1] == "ib") {
    spec->link = LinkLayer::kInfiniband;
  } else if (fields[1] == "efa") {
    spec->link = LinkLayer::kEfa;
  } else if (fields[1] == "iwarp") {
    spec->link = LinkLayer::kIwarp;
  } else {
    *why = "link must be 'roce', 'ib', 'efa' or 'iwarp', not '" + fields[1] + "'";
    return false;
  }
  spec->netdev = fields[2];
  if (spec->link == LinkLayer::kRoce || spec->link == LinkLayer::kIwarp) {
    spec->ifindex = if_nametoindex(spec->netdev.c_str());
    if (spec->ifindex == 0) {
      *why = "netdev '" + spec->netdev + "' does not exist here";
      return false;
    }
  }
  char* end = nullptr;
  long gbps = std::strtol(fields[3].c_str(), &end, 10);
  if (fields[3].empty() || *end != '\0' ||
      !encode_link_rate(static_cast<int>(gbps), &spec->active_speed, &spec->active_width)) {
    *why = "gbps '" + fields[3] + "' is not one of " + supported_rates();
    return false;
  }
  spec->gbps = static_cast<int>(gbps);
  if (fields.size() == 5) {
    // The P_Key table replaces the default one as soon as the first pkey= is seen.
    bool pkeys_given = false;
    for (const std::string& option : split(fields[4], ',')) {
      if (option.rfind("pkey=", 0) == 0 && !pkeys_given) {
        spec->pkeys.clear();
        pkeys_given = true;
      }
      if (!parse_option(option, spec, why)) return false;
    }
    for (int port = spec->ports + 1; port <= kMaxPorts; ++port) {
      if (spec->port_down(port)) {
        *why = "down=" + std::to_string(port) + " names a port the device does not have";
        return false;
      }
    }
    spec->options = fields[4];
  }
  return true;
}

}  // namespace

std::string DeviceSpec::key() const {
  static const char* const kLinks[] = {"?", "roce", "ib", "efa", "iwarp"};
  return name + ":" + kLinks[static_cast<uint32_t>(link)] + ":" + netdev + ":" + std::to_string(gbps) + ":" + options;
}

bool encode_link_rate(int gbps, uint8_t* active_speed, uint8_t* active_width) {
  for (const LinkRate& rate : kLinkRates) {
    if (rate.gbps == gbps) {
      *active_speed = rate.speed;
      *active_width = rate.width;
      return true;
    }
  }
  return false;
}

bool parse_device_specs(const char* value, std::vector<DeviceSpec>* out, std::string* error) {
  out->clear();
  std::string text = value == nullptr ? "fake0:roce:lo:100" : value;
  if (text.empty()) return true;
  for (const std::string& entry : split(text, ';')) {
    DeviceSpec spec;
    std::string why;
    if (!parse_entry(entry, &spec, &why)) {
      *error = "FAKE_VERBS_DEVICES: entry '" + entry + "': " + why;
      return false;
    }
    for (const DeviceSpec& earlier : *out) {
      if (earlier.name == spec.name) {
        *error = "FAKE_VERBS_DEVICES: device name '" + spec.name + "' appears twice";
        return false;
      }
    }
    out->push_back(spec);
  }
  return true;
}

}  // namespace sieve::fake_verbs
