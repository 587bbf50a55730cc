#include "tests/net/ib/fake_verbs/device_spec.h"

#include <net/if.h>

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

std::string supported_rates() {
  std::string list;
  for (const LinkRate& rate : kLinkRates) list += (list.empty() ? "" : ", ") + std::to_string(rate.gbps);
  return list;
}

bool parse_entry(const std::string& entry, DeviceSpec* spec, std::string* why) {
  std::vector<std::string> fields = split(entry, ':');
  if (fields.size() != 4) {
    *why = "expected name:link:netdev:gbps";
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
  } else {
    *why = "link must be 'roce' or 'ib', not '" + fields[1] + "'";
    return false;
  }
  spec->netdev = fields[2];
  if (spec->link == LinkLayer::kRoce) {
    spec->ifindex = if_nametoindex(spec->netdev.c_str());
    if (spec->ifindex == 0) {
      *why = "RoCE netdev '" + spec->netdev + "' does not exist here";
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
  return true;
}

}  // namespace

std::string DeviceSpec::key() const {
  return name + ":" + (link == LinkLayer::kRoce ? "roce" : "ib") + ":" + netdev + ":" + std::to_string(gbps);
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
