// SPDX-License-Identifier: Apache-2.0
#include "net/devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

namespace sieve::net {

std::string SocketAddress::text() const {
  char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = "?";
  uint16_t p = port();
  if (family() == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return p ? std::string(host) + ":" + std::to_string(p) : std::string(host);
  }
  if (family() == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    std::string h = host;
    char scope[IF_NAMESIZE] = {};
    if (in6->sin6_scope_id && if_indextoname(in6->sin6_scope_id, scope)) h += std::string("%") + scope;
    return p ? "[" + h + "]:" + std::to_string(p) : h;
  }
  return "<unknown address family>";
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::set_port(uint16_t p) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(p);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(p);
}

IfnameSpec parse_ifname_spec(const std::string& text) {
  IfnameSpec spec;
  size_t pos = 0;
  if (pos < text.size() && text[pos] == '^') {
    spec.exclude = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '=') {
    spec.exact = true;
    ++pos;
  }
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string name = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = name.find_first_not_of(" \t");
    size_t e = name.find_last_not_of(" \t");
    if (b != std::string::npos) spec.names.push_back(name.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return spec;
}

bool ifname_matches(const IfnameSpec& spec, const std::string& name) {
  bool listed = false;
  for (const auto& n : spec.names) {
    if (spec.exact ? name == n : name.compare(0, n.size(), n) == 0) {
      listed = true;
      break;
    }
  }
  return spec.exclude ? !listed : listed;
}

bool is_container_bridge(const std::string& name) {
  static const char* const kPrefixes[] = {"docker", "br-", "virbr", "lxcbr", "cni", "podman", "flannel", "cali"};
  for (const char* p : kPrefixes)
    if (name.compare(0, std::strlen(p), p) == 0) return true;
  return false;
}

namespace {

// Lower is better: IPv4, then global IPv6, then link-local IPv6.
int address_rank(const SocketAddress& a) {
  if (a.family() == AF_INET) return 0;
  auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
  return IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) ? 2 : 1;
}

bool family_allowed(Family f, int af) {
  if (af != AF_INET && af != AF_INET6) return false;
  if (f == Family::kIPv4) return af == AF_INET;
  if (f == Family::kIPv6) return af == AF_INET6;
  return true;
}

std::vector<Device> pick(const std::vector<InterfaceAddress>& candidates, const DeviceFilter& filter,
                         bool include_skipped) {
  IfnameSpec spec = parse_ifname_spec(filter.ifname);
  bool user_choice = !filter.ifname.empty();
  std::vector<Device> out;
  for (const auto& c : candidates) {
    if (!c.up || !family_allowed(filter.family, c.address.family())) continue;
    if (user_choice) {
      if (!ifname_matches(spec, c.name)) continue;
    } else if (!include_skipped && (c.loopback || is_container_bridge(c.name))) {
      continue;
    }
    Device* existing = nullptr;
    for (auto& d : out)
      if (d.name == c.name) existing = &d;
    if (!existing) {
      Device d;
      d.name = c.name;
      d.address = c.address;
      d.address.set_port(0);
      out.push_back(d);
    } else if (address_rank(c.address) < address_rank(existing->address)) {
      existing->address = c.address;
      existing->address.set_port(0);
    }
  }
  // Loopback last when it is only a fallback, so a real NIC would be device 0.
  std::stable_partition(out.begin(), out.end(), [&](const Device& d) {
    for (const auto& c : candidates)
      if (c.name == d.name) return !c.loopback;
    return true;
  });
  return out;
}

}  // namespace

std::vector<Device> select_devices(const std::vector<InterfaceAddress>& candidates, const DeviceFilter& filter) {
  std::vector<Device> out = pick(candidates, filter, false);
  if (out.empty() && filter.ifname.empty()) out = pick(candidates, filter, true);
  for (size_t i = 0; i < out.size(); ++i) out[i].guid = i;
  return out;
}

void place_devices(const topology::Machine& machine, std::vector<Device>& devices) {
  for (auto& d : devices) {
    const topology::Nic* nic = machine.find_nic(d.name);
    if (!nic) continue;
    d.pci_path = nic->pci_path;
    if (nic->speed_mbps > 0 && nic->speed_mbps < INT_MAX) d.speed_mbps = static_cast<int>(nic->speed_mbps);
    if (!nic->pci_bus_id.empty()) d.guid = nic->guid;
    d.numa_node = nic->numa_node;
    d.cpus = nic->cpus;
    d.pci_vendor = nic->vendor_id;
  }
}

Status discover_devices(const DeviceFilter& filter, const topology::Machine& machine, std::vector<Device>* out) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return error(Code::kSystemError, std::string("getifaddrs: ") + std::strerror(errno));
  std::vector<InterfaceAddress> candidates;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    int af = a->ifa_addr->sa_family;
    if (af != AF_INET && af != AF_INET6) continue;
    InterfaceAddress c;
    c.name = a->ifa_name;
    c.up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
    c.loopback = a->ifa_flags & IFF_LOOPBACK;
    c.address.length = af == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&c.address.storage, a->ifa_addr, c.address.length);
    candidates.push_back(c);
  }
  freeifaddrs(list);
  *out = select_devices(candidates, filter);
  if (out->empty()) {
    return error(Code::kSystemError,
                 "no usable network interface" +
                     (filter.ifname.empty() ? std::string() : " matches SIEVE_SOCKET_IFNAME=" + filter.ifname));
  }
  place_devices(machine, *out);
  return ok_status();
}

}  // namespace sieve::net
