// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_devices.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "net/ib/ib_gid.h"
#include "net/ib/ib_route.h"

namespace sieve::net::ib {

namespace {

// Per-lane rate of each bit of ibv_port_attr::active_speed / active_speed_ex, in Mbit/s: SDR ..
// NDR, then XDR (bit 8, 0x100: only active_speed_ex, of rdma-core 47 and later, can say it).
constexpr int kLaneMbps[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
// Lanes of each bit of active_width; what `ibstat` prints as Rate is lanes x the per-lane rate.
constexpr int kWidthLanes[] = {1, 4, 8, 12, 2};

int lowest_bit(uint32_t value) { return value ? __builtin_ctz(value) : -1; }

const char* transport_name(ibv_transport_type type) {
  switch (type) {
    case IBV_TRANSPORT_IB: return "InfiniBand";
    case IBV_TRANSPORT_IWARP: return "iWARP";
    case IBV_TRANSPORT_USNIC: return "usNIC";
    case IBV_TRANSPORT_USNIC_UDP: return "usNIC UDP";
    case IBV_TRANSPORT_UNSPECIFIED: return "unspecified (EFA?)";
    default: return "unknown";
  }
}

int mtu_bytes(ibv_mtu mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0; }

bool gid_is_zero(const ibv_gid& gid) {
  static const ibv_gid zero{};
  return std::memcmp(&gid, &zero, sizeof(gid)) == 0;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Older libraries without _ibv_query_gid_ex: the kernel's sysfs attributes say the same.
void describe_gid_from_sysfs(const std::string& ibdev_path, int port, GidEntry* entry) {
  const std::string base = ibdev_path + "/ports/" + std::to_string(port) + "/gid_attrs/";
  const std::string type = read_line(base + "types/" + std::to_string(entry->index));
  entry->type = type == "RoCE v2" ? GidType::kRoCEv2 : type.empty() ? GidType::kIB : GidType::kRoCEv1;
  entry->netdev = read_line(base + "ndevs/" + std::to_string(entry->index));
}

}  // namespace

void read_gid_table(const VerbsLibrary& v, ibv_context* ctx, const std::string& ibdev_path, int port, int table_length,
                    IbPort* out) {
  out->gids.clear();
  constexpr int kMaxGidsRead = 256;  // tables are 16-256 long; the entries in use come first
  for (int i = 0; i < std::min(table_length, kMaxGidsRead); ++i) {
    GidEntry entry;
    entry.index = i;
    if (v.query_gid_ex) {
      ibv_gid_entry e{};
      if (v.query_gid_ex(ctx, port, i, &e, 0, sizeof(e)) != 0) continue;  // ENODATA: unused entry
      entry.gid = e.gid;
      entry.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoCEv2
                   : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoCEv1
                                                        : GidType::kIB;
      char name[IF_NAMESIZE] = {};
      if (e.ndev_ifindex && if_indextoname(e.ndev_ifindex, name)) entry.netdev = name;
    } else {
      if (v.query_gid(ctx, port, i, &entry.gid) != 0) continue;
      if (out->link_layer == LinkLayer::kEthernet) describe_gid_from_sysfs(ibdev_path, port, &entry);
    }
    if (out->link_layer == LinkLayer::kInfiniBand) entry.type = GidType::kIB;
    if (!gid_is_zero(entry.gid)) out->gids.push_back(entry);
  }
}

namespace {

// NCCL's probe: registering fd -1 fails with EBADF where the kernel and provider know dma-bufs, and
// with EOPNOTSUPP / EPROTONOSUPPORT where they do not.
bool probe_dmabuf(const VerbsLibrary& v, ibv_context* ctx) {
  if (!v.reg_dmabuf_mr) return false;
  ibv_pd* pd = v.alloc_pd(ctx);
  if (!pd) return false;
  errno = 0;
  ibv_mr* mr = v.reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
  const int err = errno;
  if (mr) v.dereg_mr(mr);
  v.dealloc_pd(pd);
  return !mr && err != EOPNOTSUPP && err != EPROTONOSUPPORT;
}

topology::Placement place(const topology::Machine& machine, const std::string& device, const std::string& ibdev_path) {
  for (const topology::Nic& nic : machine.nics)
    if (nic.kind == topology::NicKind::kRdma && nic.name == device) return nic;
  topology::Placement placement;  // a device hwloc did not report: its PCI function from sysfs
  char resolved[PATH_MAX];
  if (!ibdev_path.empty() && realpath((ibdev_path + "/device").c_str(), resolved)) {
    placement.pci_path = resolved;
    placement.pci_bus_id = placement.pci_path.substr(placement.pci_path.rfind('/') + 1);
  }
  return placement;
}

std::string paired_netdev(const topology::Machine& machine, const std::string& device) {
  for (const topology::Nic& nic : machine.nics)
    if (nic.kind == topology::NicKind::kRdma && nic.name == device) return nic.paired;
  return "";
}

struct OpenContext {
  const VerbsLibrary& v;
  ibv_context* ctx;
  ~OpenContext() {
    if (ctx) v.close_device(ctx);
  }
};

}  // namespace

int port_speed_mbps(uint32_t speed, uint32_t width) {
  const int s = lowest_bit(speed);
  const int w = lowest_bit(width);
  if (s < 0 || w < 0 || s >= static_cast<int>(std::size(kLaneMbps)) || w >= static_cast<int>(std::size(kWidthLanes)))
    return 0;
  return kLaneMbps[s] * kWidthLanes[w];
}

int port_speed_mbps(const ibv_port_attr& a) {
#ifdef SIEVE_HAVE_ACTIVE_SPEED_EX
  // XDR and later exist only in active_speed_ex (active_speed's 8 bits ran out); NCCL takes it
  // whenever it is nonzero.
  if (a.active_speed_ex) return port_speed_mbps(a.active_speed_ex, a.active_width);
#endif
  return port_speed_mbps(a.active_speed, a.active_width);
}

std::string GidEntry::text() const {
  char buffer[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, gid.raw, buffer, sizeof(buffer));
  return buffer;
}

Status discover_ports(const VerbsLibrary& v, const topology::Machine& machine, std::vector<IbPort>* out,
                      std::vector<std::string>* notes) {
  out->clear();
  std::unique_ptr<DeviceList> devices;
  Status st = DeviceList::get(v, &devices);
  if (!st.ok()) return st;
  for (int d = 0; d < devices->size(); ++d) {
    ibv_device* device = (*devices)[d];
    const std::string name = v.get_device_name(device);
    // InfiniBand and RoCE both report the IB transport. iWARP (its RC queue pairs connect only
    // through rdma_cm), usNIC and EFA (no RC queue pairs at all) would be selected and then fail at
    // the first connect, instead of leaving the job to TCP.
    if (device->transport_type != IBV_TRANSPORT_IB) {
      notes->push_back(name + ": transport " + transport_name(device->transport_type) +
                       ", not InfiniBand or RoCE (no RC queue pairs Sieve can connect), skipped");
      continue;
    }
    OpenContext context{v, v.open_device(device)};
    if (!context.ctx) {
      notes->push_back(name + ": ibv_open_device failed (" + std::strerror(errno) + "), skipped");
      continue;
    }
    ibv_device_attr attr{};
    if (v.query_device(context.ctx, &attr) != 0) {
      notes->push_back(name + ": ibv_query_device failed (" + std::strerror(errno) + "), skipped");
      continue;
    }
    const std::string ibdev_path = device->ibdev_path;
    const bool dmabuf = probe_dmabuf(v, context.ctx);
    const topology::Placement placement = place(machine, name, ibdev_path);
    std::vector<int> near_gpus;
    for (size_t g = 0; g < machine.gpus.size(); ++g)
      if (!placement.pci_bus_id.empty() && topology::classify(placement, machine.gpus[g]) <= topology::PathClass::kPXB)
        near_gpus.push_back(static_cast<int>(g));
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr port_attr{};
      if (v.port_attributes(context.ctx, static_cast<uint8_t>(p), &port_attr) != 0) {
        notes->push_back(name + ":" + std::to_string(p) + ": ibv_query_port failed (" + std::strerror(errno) +
                         "), skipped");
        continue;
      }
      if (port_attr.link_layer != IBV_LINK_LAYER_INFINIBAND && port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        notes->push_back(name + ":" + std::to_string(p) +
                         ": link layer unspecified, neither InfiniBand nor Ethernet, skipped");
        continue;
      }
      IbPort port;
      port.device = name;
      port.port = p;
      port.link_layer = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet : LinkLayer::kInfiniBand;
      port.active = port_attr.state == IBV_PORT_ACTIVE;
      port.speed_mbps = port_speed_mbps(port_attr);
      port.active_mtu = port_attr.active_mtu;
      port.mtu_bytes = mtu_bytes(port_attr.active_mtu);
      port.lid = port_attr.lid;
      port.grh_required = (port_attr.flags & IBV_QPF_GRH_REQUIRED) != 0;
      port.pkey_table_length = port_attr.pkey_tbl_len;
      port.guid = be64toh(attr.node_guid);
      port.max_qp = attr.max_qp;
      port.max_qp_wr = attr.max_qp_wr;
      port.max_sge = attr.max_sge;
      port.max_cqe = attr.max_cqe;
      port.max_msg_sz = port_attr.max_msg_sz;
      port.dmabuf = dmabuf;
      port.placement = placement;
      port.near_gpus = near_gpus;
      port.ibdev_path = ibdev_path;
      port.gid_table_length = port_attr.gid_tbl_len;
      read_gid_table(v, context.ctx, ibdev_path, p, port_attr.gid_tbl_len, &port);
      int gid = -1;
      if (port.link_layer == LinkLayer::kEthernet && choose_gid(port, -1, &gid).ok()) {
        for (const GidEntry& e : port.gids)
          if (e.index == gid) port.netdev = e.netdev;
      }
      if (port.netdev.empty()) port.netdev = paired_netdev(machine, name);
      out->push_back(std::move(port));
    }
  }
  return ok_status();
}

Status parse_hca_spec(const std::string& text, HcaSpec* out) {
  *out = HcaSpec{};
  size_t pos = 0;
  if (pos < text.size() && text[pos] == '^') {
    out->exclude = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '=') {
    out->exact = true;
    ++pos;
  }
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (!item.empty()) {
      HcaSpec::Entry entry;
      const size_t colon = item.find(':');
      entry.name = item.substr(0, colon);
      if (colon != std::string::npos) {
        const std::string port = item.substr(colon + 1);
        char* end = nullptr;
        errno = 0;
        const long value = std::strtol(port.c_str(), &end, 10);
        if (port.empty() || *end != '\0' || errno != 0 || value < 1 || value > 255)
          return error(Code::kInvalidArgument,
                       "SIEVE_IB_HCA (or NCCL_IB_HCA) entry \"" + item + "\": the port after ':' must be 1-255");
        entry.port = static_cast<int>(value);
      }
      if (entry.name.empty())
        return error(Code::kInvalidArgument, "SIEVE_IB_HCA (or NCCL_IB_HCA) entry \"" + item + "\" names no device");
      out->entries.push_back(entry);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if ((out->exclude || out->exact) && out->entries.empty())
    return error(Code::kInvalidArgument,
                 "SIEVE_IB_HCA (or NCCL_IB_HCA) \"" + text + "\" names no device after its ^ or =");
  return ok_status();
}

bool hca_matches(const HcaSpec& spec, const IbPort& port) {
  for (const HcaSpec::Entry& e : spec.entries) {
    const bool name_ok = spec.exact ? port.device == e.name : port.device.compare(0, e.name.size(), e.name) == 0;
    if (name_ok && (e.port < 0 || e.port == port.port)) return true;
  }
  return false;
}

std::vector<IbPort> select_ports(const std::vector<IbPort>& ports, const HcaSpec& spec) {
  std::vector<IbPort> selected;
  for (const IbPort& port : ports) {
    if (!port.active) continue;
    if (!spec.entries.empty() && hca_matches(spec, port) == spec.exclude) continue;
    selected.push_back(port);
  }
  return selected;
}

Status choose_gid(const IbPort& port, int configured, int* index) {
  GidPolicy policy;
  policy.index = configured;
  return select_gid(port, policy, index);
}

}  // namespace sieve::net::ib
