// The fake devices a process sees, from FAKE_VERBS_DEVICES (read at every ibv_get_device_list):
// semicolon-separated `name:link:netdev:gbps`, link `roce` or `ib`. Unset: one RoCE device
// `fake0:roce:lo:100`. Set but empty: no devices. (Deliberately not a SIEVE_* name: Sieve's registry
// reports unknown SIEVE_* variables.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sieve::fake_verbs {

enum class LinkLayer : uint32_t { kRoce = 1, kInfiniband = 2 };

struct DeviceSpec {
  std::string name;
  LinkLayer link = LinkLayer::kRoce;
  std::string netdev;      // RoCE: must exist (its ifindex is the GIDs' ndev_ifindex); IB: may be empty
  int gbps = 0;
  unsigned ifindex = 0;    // if_nametoindex(netdev) for RoCE, 0 for IB
  uint8_t active_speed = 0;  // IB encoding (ibv_port_attr::active_speed)
  uint8_t active_width = 0;  // IB encoding (ibv_port_attr::active_width)

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
