// SPDX-License-Identifier: Apache-2.0
// The verbs implementation of Transport: the ports SIEVE_IB_HCA selects, one protection domain per
// device, a bootstrap listener on an IP interface (the shared, authenticated handshake with no data
// sockets), and comms whose queue pairs are set up over that socket.
#include <algorithm>
#include <map>
#include <mutex>

#include "net/bootstrap.h"
#include "net/handshake.h"
#include "net/ib/ib_comm.h"
#include "net/ib/ib_devices.h"
#include "net/ib/ib_establish.h"
#include "net/ib/ib_gid.h"
#include "net/ib/verbs_library.h"
#include "net/log.h"
#include "net/transport.h"
#include "net/wire.h"
#include "topology/discover.h"

namespace sieve::net {

namespace ib {
namespace {

// The connector's class of service: SIEVE_IB_TC / SIEVE_IB_SL (or NCCL's NCCL_IB_TC / NCCL_IB_SL,
// which the plugin put in the same options), else the communicator's traffic class, as NCCL's IB
// transport uses it for both (the service level only where it fits its 4 bits), else 0.
ServiceClass service_class(const TransportOptions& o, int traffic_class) {
  ServiceClass c;
  if (o.ib_traffic_class >= 0) c.traffic_class = static_cast<uint8_t>(o.ib_traffic_class);
  else if (traffic_class >= 0 && traffic_class <= 255) c.traffic_class = static_cast<uint8_t>(traffic_class);
  if (o.ib_service_level >= 0) c.service_level = static_cast<uint8_t>(o.ib_service_level);
  else if (traffic_class >= 0 && traffic_class <= 15) c.service_level = static_cast<uint8_t>(traffic_class);
  return c;
}

// The largest message a comm on `port` carries: what immediates can say, and what one work request
// may carry on the port (a message on one queue pair is one write).
uint64_t max_message_bytes(const IbPort& port) {
  return port.max_msg_sz > 0 ? std::min<uint64_t>(kMaxMessageBytes, port.max_msg_sz) : kMaxMessageBytes;
}

// A queue pair per SIEVE_IB_QPS and the flush loopback of each receive comm.
int max_comms_of(const IbPort& port, int nqps) {
  if (port.max_qp <= 0) return 65536;
  return std::max(1, std::min(65536, port.max_qp / (nqps + 1)));
}

class IbListenComm final : public ListenComm {
 public:
  IbListenComm(const TransportOptions& options, Fd listener, uint64_t nonce, std::string address, IbCommConfig config)
      : config_(std::move(config)),
        handshakes_(options, std::move(listener), nonce, std::move(address), Carrier::kVerbs) {}

  Status accept(std::unique_ptr<RecvComm>* comm) override {
    comm->reset();
    Connection c;
    bool got = false;
    handshakes_.accept(&c, &got);
    if (got)
      establishing_.push_back(std::make_unique<Establishment>(Establishment::Role::kListener, config_, std::move(c)));
    for (size_t i = 0; i < establishing_.size();) {
      bool done = false;
      Status st = establishing_[i]->progress(&done);
      if (!st.ok()) {
        // An authenticated peer whose set-up failed: dropped like a bad handshake, the listener lives on.
        ++rejected_;
        SIEVE_WARN("listener %s dropped %s: %s", handshakes_.address().c_str(), establishing_[i]->peer().c_str(),
                   st.message().c_str());
        establishing_.erase(establishing_.begin() + i);
        continue;
      }
      if (done) {
        *comm = establishing_[i]->take_recv();
        establishing_.erase(establishing_.begin() + i);
        return ok_status();
      }
      ++i;
    }
    return ok_status();
  }

  uint64_t take_rejected() override {
    uint64_t n = rejected_ + handshakes_.take_rejected();
    rejected_ = 0;
    return n;
  }

 private:
  const IbCommConfig config_;
  HandshakeListener handshakes_;
  std::vector<std::unique_ptr<Establishment>> establishing_;
  uint64_t rejected_ = 0;
};

// A connect in progress: the shared handshake, then the queue-pair set-up.
class IbConnect final : public ConnectAttempt {
 public:
  IbConnect(const TransportOptions& options, const wire::HandleFields& handle, IbCommConfig config)
      : connector_(options, handle, Carrier::kVerbs), config_(std::move(config)) {}

  Status progress(std::unique_ptr<SendComm>* comm) override {
    if (!establishment_) {
      Connection c;
      bool done = false;
      Status st = connector_.progress(&c, &done);
      if (!st.ok() || !done) return st;
      establishment_ = std::make_unique<Establishment>(Establishment::Role::kConnector, config_, std::move(c));
    }
    bool done = false;
    Status st = establishment_->progress(&done);
    if (!st.ok() || !done) return st;
    *comm = establishment_->take_send();
    return ok_status();
  }

 private:
  Connector connector_;
  const IbCommConfig config_;
  std::unique_ptr<Establishment> establishment_;
};

struct PortEntry {
  IbPort port;
  PortAddress address;
  std::shared_ptr<DeviceContext> device;
  std::shared_ptr<const IbPort> info;          // `port`, shared with the comms: they read its GID table again
  std::shared_ptr<RegionTable> registrations;  // the device's, shared by its ports and their comms
};

class IbTransport final : public Transport {
 public:
  IbTransport(const TransportOptions& options, GidPolicy gid_policy, std::vector<PortEntry> ports,
              std::vector<Device> devices)
      : options_(options), gid_policy_(std::move(gid_policy)), ports_(std::move(ports)), devices_(std::move(devices)) {}

  const std::vector<Device>& devices() const override { return devices_; }

  Status listen(int dev, Handle* handle, std::unique_ptr<ListenComm>* comm) override {
    comm->reset();
    BootstrapListener listener;
    Status st = open_bootstrap_listener(devices_, dev, handle, &listener);
    if (!st.ok()) return st;
    SIEVE_INFO("listening on %s for verbs connections on %s", listener.address.c_str(), devices_[dev].name.c_str());
    *comm = std::make_unique<IbListenComm>(options_, std::move(listener.fd), listener.nonce,
                                           std::move(listener.address), config(dev));
    return ok_status();
  }

  using Transport::connect;
  Status connect(int dev, int traffic_class, Handle* handle, std::unique_ptr<SendComm>* comm) override {
    comm->reset();
    wire::HandleFields fields;
    Status st = read_peer_handle(devices_, dev, *handle, &fields);
    if (!st.ok()) return st;
    const auto make = [&]() -> std::unique_ptr<ConnectAttempt> {
      IbCommConfig c = config(dev);
      c.service = service_class(options_, traffic_class);
      return std::make_unique<IbConnect>(options_, fields, std::move(c));
    };
    st = attempts_.progress(handle, fields, make, comm);
    if (*comm)
      SIEVE_INFO("connected to %s over %s: %d queue pair(s)", (*comm)->peer().c_str(), devices_[dev].name.c_str(),
                 options_.ib_qps);
    return st;
  }

 private:
  IbCommConfig config(int dev) const {
    IbCommConfig c;
    c.device = ports_[dev].device;
    c.port = ports_[dev].address;
    c.port_info = ports_[dev].info;
    c.registrations = ports_[dev].registrations;
    c.gid_policy = gid_policy_;
    c.adaptive_routing_bytes = static_cast<size_t>(options_.ib_ar_threshold);
    c.nqps = options_.ib_qps;
    c.peer_timeout_ms = options_.peer_timeout_ms;
    c.max_cqe = ports_[dev].port.max_cqe;
    c.max_message_bytes = max_message_bytes(ports_[dev].port);
    c.gpu_flush = devices_[dev].dmabuf || devices_[dev].cuda_pointers;
    c.relaxed_ordering = options_.ib_relaxed_ordering;
    // Adaptive routing is an InfiniBand switch feature (on by default in NCCL there); RoCE fabrics
    // keep a flow on one path unless told otherwise.
    c.adaptive_routing = options_.ib_adaptive_routing >= 0 ? options_.ib_adaptive_routing != 0
                                                           : ports_[dev].address.link_layer == LinkLayer::kInfiniBand;
    c.retry.timeout = static_cast<uint8_t>(options_.ib_timeout);
    c.retry.retry_count = static_cast<uint8_t>(options_.ib_retry_count);
    return c;
  }

  const TransportOptions options_;
  const GidPolicy gid_policy_;
  const std::vector<PortEntry> ports_;
  const std::vector<Device> devices_;
  ConnectAttempts attempts_;
};

Status check_options(const TransportOptions& o) {
  if (o.ib_qps < 1 || o.ib_qps > kMaxQps)
    return error(Code::kInvalidArgument, "SIEVE_IB_QPS=" + std::to_string(o.ib_qps) + " is outside 1-16");
  if (o.ib_traffic_class > 255)
    return error(Code::kInvalidArgument, "SIEVE_IB_TC=" + std::to_string(o.ib_traffic_class) + " is outside 0-255");
  if (o.ib_service_level > 15)
    return error(Code::kInvalidArgument, "SIEVE_IB_SL=" + std::to_string(o.ib_service_level) + " is outside 0-15");
  if (o.ib_timeout < 1 || o.ib_timeout > 31)
    return error(Code::kInvalidArgument, "SIEVE_IB_TIMEOUT=" + std::to_string(o.ib_timeout) + " is outside 1-31");
  if (o.ib_retry_count < 0 || o.ib_retry_count > 7)
    return error(Code::kInvalidArgument, "SIEVE_IB_RETRY_CNT=" + std::to_string(o.ib_retry_count) + " is outside 0-7");
  if (o.ib_pkey_index < 0 || o.ib_pkey_index > 0xffff)
    return error(Code::kInvalidArgument, "SIEVE_IB_PKEY=" + std::to_string(o.ib_pkey_index) + " is outside 0-65535");
  if (o.ib_ar_threshold < 0)
    return error(Code::kInvalidArgument, "SIEVE_IB_AR_THRESHOLD=" + std::to_string(o.ib_ar_threshold) + " is negative");
  return check_common_options(o);
}

std::string port_list(const std::vector<IbPort>& ports) {
  if (ports.empty()) return "none";
  std::string text;
  for (const auto& p : ports) text += (text.empty() ? "" : ", ") + p.name() + (p.active ? " (active)" : " (down)");
  return text;
}

// The P_Key at SIEVE_IB_PKEY's index: what the peer's must match (exchanged at set-up).
Status read_pkey(const VerbsLibrary& verbs, const DeviceContext& device, const IbPort& port, int index,
                 PortAddress* a) {
  __be16 pkey = 0;
  if (verbs.query_pkey(device.context(), static_cast<uint8_t>(port.port), index, &pkey) != 0)
    return error(Code::kInvalidArgument, "SIEVE_IB_PKEY (or NCCL_IB_PKEY) index " + std::to_string(index) +
                                             " is not in the P_Key table of " + port.name() + " (" +
                                             std::to_string(port.pkey_table_length) + " entries)");
  a->pkey_index = index;
  a->pkey = be16toh(pkey);
  return ok_status();
}

Status gid_policy_of(const TransportOptions& o, GidPolicy* out) {
  *out = GidPolicy{};
  out->index = o.ib_gid_index;
  out->family = o.ib_addr_family;
  Status st = parse_address_range(o.ib_addr_range, "SIEVE_IB_ADDR_RANGE (or NCCL_IB_ADDR_RANGE)", &out->range);
  if (!st.ok()) return st;
  if (out->range.set && out->family != Family::kAny && out->family != out->range.family)
    return error(Code::kInvalidArgument, "the GID address range " + o.ib_addr_range + " is not of the address family " +
                                             (out->family == Family::kIPv4 ? "ipv4" : "ipv6") +
                                             " asked for (SIEVE_IB_ADDR_FAMILY / SIEVE_IB_ADDR_RANGE, or "
                                             "NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE): no GID could match both");
  return ok_status();
}

// Opens each selected port's device once and resolves the GID a connection from it uses.
Status open_ports(const VerbsLibrary& verbs, const TransportOptions& options, const GidPolicy& policy,
                  const std::vector<IbPort>& selected, std::vector<PortEntry>* out) {
  std::unique_ptr<DeviceList> list;
  Status st = DeviceList::get(verbs, &list);
  if (!st.ok()) return st;
  std::map<std::string, std::shared_ptr<DeviceContext>> opened;
  std::map<std::string, std::shared_ptr<RegionTable>> tables;
  for (const IbPort& port : selected) {
    auto it = opened.find(port.device);
    if (it == opened.end()) {
      ibv_device* device = list->find(port.device);
      if (!device) {
        st = error(Code::kSystemError, "RDMA device " + port.device + " disappeared");
        break;
      }
      std::shared_ptr<DeviceContext> context;
      st = DeviceContext::open(verbs, device, port.device, &context);
      if (!st.ok()) break;
      tables[port.device] = std::make_shared<RegionTable>(context);
      it = opened.emplace(port.device, std::move(context)).first;
    }
    PortEntry entry;
    entry.port = port;
    entry.info = std::make_shared<const IbPort>(port);
    entry.device = it->second;
    entry.registrations = tables[port.device];
    PortAddress& a = entry.address;
    a.name = port.name();
    a.port = port.port;
    a.link_layer = port.link_layer;
    a.lid = port.lid;
    a.grh_required = port.grh_required;
    a.mtu = port.active_mtu;
    st = select_gid(port, policy, &a.gid_index);
    if (!st.ok()) break;
    st = read_pkey(verbs, *entry.device, port, options.ib_pkey_index, &a);
    if (!st.ok()) break;
    // Discovery read the table already (an InfiniBand port without a populated entry 0 keeps zeros);
    // each connection reads it again (Establishment::refresh_port_gid).
    for (const GidEntry& g : port.gids)
      if (g.index == a.gid_index) a.gid = g.gid;
    out->push_back(std::move(entry));
  }
  return st;
}

}  // namespace
}  // namespace ib

Status Transport::create_ib(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  Status st = ib::check_options(options);
  if (!st.ok()) return st;
  const ib::VerbsLibrary* verbs = nullptr;
  st = ib::load_verbs(&verbs);
  if (!st.ok()) return st;
  const topology::Machine machine = placement_machine(options.topology);
  std::vector<ib::IbPort> ports;
  std::vector<std::string> notes;
  st = ib::discover_ports(*verbs, machine, &ports, &notes);
  if (!st.ok()) return st;
  for (const auto& note : notes) SIEVE_INFO("rdma: %s", note.c_str());
  ib::HcaSpec spec;
  st = ib::parse_hca_spec(options.ib_hca, &spec);
  if (!st.ok()) return st;
  const std::vector<ib::IbPort> selected = ib::select_ports(ports, spec);
  if (selected.empty())
    return error(Code::kSystemError,
                 "no active RDMA port" +
                     (options.ib_hca.empty() ? std::string() : " matches SIEVE_IB_HCA=" + options.ib_hca) +
                     " (ports found: " + ib::port_list(ports) + ", libibverbs " + verbs->path + ")");
  // Queue pairs are set up over a TCP connection: an IP interface SIEVE_SOCKET_IFNAME selects.
  std::vector<Device> interfaces;
  st = discover_devices(options.devices, machine, &interfaces);
  if (!st.ok())
    return error(st.code(),
                 "the verbs transport sets up its connections over TCP and found no interface for it: " + st.message());
  ib::GidPolicy gid_policy;
  st = ib::gid_policy_of(options, &gid_policy);
  if (!st.ok()) return st;
  std::vector<ib::PortEntry> entries;
  st = ib::open_ports(*verbs, options, gid_policy, selected, &entries);
  if (!st.ok()) return st;
  // GPUDirect RDMA by device pointer, where a peer-memory client is loaded (older kernels and
  // drivers, where dma-buf is not offered); NCCL's IB transport reports NCCL_PTR_CUDA on the same test.
  std::string peer_memory;
  const bool cuda_pointers = ib::peer_memory_loaded(options.topology.sysfs_root, &peer_memory);
  std::vector<Device> devices;
  for (const auto& e : entries) {
    Device d;
    d.name = e.port.name();
    d.address = interfaces.front().address;
    d.pci_path = e.port.placement.pci_path;
    if (e.port.speed_mbps > 0) d.speed_mbps = e.port.speed_mbps;
    d.guid = e.port.guid;
    d.port = e.port.port;
    d.numa_node = e.port.placement.numa_node;
    d.cpus = e.port.placement.cpus;
    d.pci_vendor = e.port.placement.vendor_id;
    d.dmabuf = e.port.dmabuf && verbs->reg_dmabuf_mr != nullptr;
    d.cuda_pointers = cuda_pointers;
    d.global_registration = true;  // the device's RegionTable (ib_memory.h)
    d.max_comms = ib::max_comms_of(e.port, options.ib_qps);
    d.max_message_bytes = ib::max_message_bytes(e.port);
    SIEVE_INFO("device %s %s speed %d Mbps numa %d gid index %d%s%s, set-up over %s", d.name.c_str(),
               e.address.link_layer == ib::LinkLayer::kEthernet ? "RoCE" : "InfiniBand", d.speed_mbps, d.numa_node,
               e.address.gid_index, d.dmabuf ? ", dma-buf" : "",
               d.cuda_pointers ? (", GPU pointers (" + peer_memory + ")").c_str() : "",
               interfaces.front().address.text().c_str());
    devices.push_back(std::move(d));
  }
  *out = std::make_unique<ib::IbTransport>(options, std::move(gid_policy), std::move(entries), std::move(devices));
  return ok_status();
}

}  // namespace sieve::net
