// The TCP implementation of Transport: device list, listen, and connect attempts kept by id so the
// handle NCCL passes back can name the attempt in progress.
#include <algorithm>
#include <map>
#include <mutex>

#include "net/comm.h"
#include "net/handshake.h"
#include "net/log.h"
#include "net/transport.h"
#include "net/wire.h"
#include "topology/machine.h"

namespace sieve::net {

namespace {

constexpr size_t kRateBurstChunks = 4;  // the shaper lets this many stripes go out back to back

Status check_options(const TransportOptions& o) {
  if (o.nsocks < 0 || o.nsocks > kMaxSockets)
    return error(Code::InvalidArgument, "SIEVE_NSOCKS=" + std::to_string(o.nsocks) + " is outside 0-16 (0 = auto)");
  if (o.nthreads < 0 || o.nthreads > kMaxSockets)
    return error(Code::InvalidArgument, "SIEVE_NTHREADS=" + std::to_string(o.nthreads) + " is outside 0-16 (0 = auto)");
  if (o.chunk_size < 4096 || o.chunk_size > (1u << 30))
    return error(Code::InvalidArgument, "SIEVE_CHUNK_SIZE=" + std::to_string(o.chunk_size) + " is outside 4K-1G");
  if (o.rate_limit_mbps < 0)
    return error(Code::InvalidArgument, "SIEVE_RATE_LIMIT_MBPS=" + std::to_string(o.rate_limit_mbps) + " is negative");
  if (o.peer_timeout_ms < 100)
    return error(Code::InvalidArgument, "SIEVE_PEER_TIMEOUT_MS=" + std::to_string(o.peer_timeout_ms) + " is below 100");
  return Status::ok();
}

// A link-local IPv6 address is only meaningful with an interface index, and the listener's index
// names an interface of the listener's host: reach it through our own device's interface instead.
void use_local_scope(const Device& local, SocketAddress* remote) {
  if (remote->family() != AF_INET6 || local.address.family() != AF_INET6) return;
  auto* r = reinterpret_cast<sockaddr_in6*>(&remote->storage);
  if (!IN6_IS_ADDR_LINKLOCAL(&r->sin6_addr)) return;
  r->sin6_scope_id = reinterpret_cast<const sockaddr_in6*>(&local.address.storage)->sin6_scope_id;
}

CommOptions comm_options(const TransportOptions& o, const std::vector<int>& helper_cpus,
                         std::shared_ptr<RateLimiter> rate_limiter) {
  CommOptions c;
  c.codec = o.codec;
  c.rate_limiter = std::move(rate_limiter);
  c.helper_cpus = helper_cpus;
  c.nthreads = o.nthreads;
  c.progress = o.progress;
  c.inline_threshold = o.inline_threshold;
  c.peer_timeout_ms = o.peer_timeout_ms;
  return c;
}

// The listening side: the shared handshake, then receive comms on the connection's sockets.
class TcpListenComm final : public ListenComm {
 public:
  TcpListenComm(const TransportOptions& options, Fd listener, uint64_t nonce, std::string address,
                std::vector<int> helper_cpus)
      : options_(options),
        helper_cpus_(std::move(helper_cpus)),
        handshakes_(options, std::move(listener), nonce, std::move(address), Carrier::Tcp) {}

  Status accept(std::unique_ptr<RecvComm>* comm) override {
    comm->reset();
    Connection c;
    bool got = false;
    handshakes_.accept(&c, &got);
    if (!got) return Status::ok();
    auto recv = std::make_unique<TcpRecvComm>(std::move(c), comm_options(options_, helper_cpus_, nullptr));
    Status st = recv->start(StripeWorker::Direction::Receive);
    if (!st.is_ok()) return st;
    *comm = std::move(recv);
    return Status::ok();
  }
  uint64_t take_rejected() override { return handshakes_.take_rejected(); }

 private:
  const TransportOptions options_;
  const std::vector<int> helper_cpus_;
  HandshakeListener handshakes_;
};

// A connect in progress: the shared handshake, then a send comm with the device's helper CPUs and shaper.
struct TcpConnect {
  TcpConnect(const TransportOptions& o, const wire::HandleFields& handle, std::vector<int> cpus,
             std::shared_ptr<RateLimiter> limiter)
      : options(o), connector(o, handle, Carrier::Tcp), helper_cpus(std::move(cpus)), rate_limiter(std::move(limiter)) {}

  Status progress(std::unique_ptr<SendComm>* comm) {
    Connection c;
    bool done = false;
    Status st = connector.progress(&c, &done);
    if (!st.is_ok() || !done) return st;
    auto send = std::make_unique<TcpSendComm>(std::move(c), comm_options(options, helper_cpus, rate_limiter));
    st = send->start(StripeWorker::Direction::Send);
    if (!st.is_ok()) return st;
    *comm = std::move(send);
    return Status::ok();
  }

  const TransportOptions options;
  Connector connector;
  const std::vector<int> helper_cpus;
  const std::shared_ptr<RateLimiter> rate_limiter;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportOptions& options, std::vector<Device> devices, bool pin_threads)
      : options_(options), devices_(std::move(devices)), pin_threads_(pin_threads) {
    // One bucket per device, shared by every connection of it: the emulated link is the device's.
    if (options.rate_limit_mbps > 0)
      for (size_t i = 0; i < devices_.size(); ++i)
        rate_limiters_.push_back(std::make_shared<RateLimiter>(options.rate_limit_mbps, kRateBurstChunks * options.chunk_size));
  }

  const std::vector<Device>& devices() const override { return devices_; }

  Status listen(int dev, Handle* handle, std::unique_ptr<ListenComm>* comm) override {
    comm->reset();
    Status st = check_device(dev);
    if (!st.is_ok()) return st;
    Fd fd;
    SocketAddress bound;
    st = make_listener(devices_[dev].address, &fd, &bound);
    if (!st.is_ok()) return st;
    wire::HandleFields fields;
    fields.address = bound;
    fields.listener_nonce = random64();
    wire::encode_handle(fields, handle->bytes);
    *comm = std::make_unique<TcpListenComm>(options_, std::move(fd), fields.listener_nonce, bound.text(),
                                            helper_cpus(dev));
    SIEVE_INFO("listening on %s (%s)", bound.text().c_str(), devices_[dev].name.c_str());
    return Status::ok();
  }

  Status connect(int dev, Handle* handle, std::unique_ptr<SendComm>* comm) override {
    comm->reset();
    Status st = check_device(dev);
    if (!st.is_ok()) return st;
    wire::HandleFields fields;
    st = decode_handle(handle->bytes, &fields);
    if (!st.is_ok()) return st;
    use_local_scope(devices_[dev], &fields.address);
    TcpConnect* connector = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (fields.pending_connect) {
        auto it = connecting_.find(fields.pending_connect);
        if (it == connecting_.end())
          return error(Code::InvalidArgument, "handle names a connect attempt this process does not know");
        connector = it->second.get();
      } else {
        uint64_t id = ++last_id_;
        // The connecting side picks the shape: the listener takes whatever socket count arrives.
        TransportOptions shaped = options_;
        const StripeShape shape = stripe_shape(options_, devices_[dev].speed_mbps, devices_[dev].pci_vendor);
        shaped.nsocks = shape.nsocks;
        shaped.nthreads = shape.nthreads;
        shaped.progress = shape.inline_progress ? TransportOptions::Progress::Inline : TransportOptions::Progress::Helpers;
        auto owned = std::make_unique<TcpConnect>(shaped, fields, helper_cpus(dev),
                                                  rate_limiters_.empty() ? nullptr : rate_limiters_[dev]);
        connector = owned.get();
        connecting_.emplace(id, std::move(owned));
        wire::set_handle_pending(handle->bytes, id);
        fields.pending_connect = id;
      }
    }
    st = connector->progress(comm);
    if (!st.is_ok() || *comm) {
      std::lock_guard<std::mutex> lock(mutex_);
      connecting_.erase(fields.pending_connect);
      wire::set_handle_pending(handle->bytes, 0);
    }
    if (*comm) {
      const StripeShape shape = stripe_shape(options_, devices_[dev].speed_mbps, devices_[dev].pci_vendor);
      if (shape.inline_progress)
        SIEVE_INFO("connected to %s over %s: %d data socket(s), moved inline by the caller's thread",
                   (*comm)->peer().c_str(), devices_[dev].name.c_str(), shape.nsocks);
      else
        SIEVE_INFO("connected to %s over %s: %d data socket(s), %d helper thread(s)", (*comm)->peer().c_str(),
                   devices_[dev].name.c_str(), shape.nsocks, std::min(shape.nthreads, shape.nsocks));
    }
    return st;
  }

 private:
  Status check_device(int dev) const {
    if (dev < 0 || dev >= static_cast<int>(devices_.size()))
      return error(Code::InvalidArgument, "device " + std::to_string(dev) + " does not exist (" +
                                              std::to_string(devices_.size()) + " devices)");
    return Status::ok();
  }

  std::vector<int> helper_cpus(int dev) const { return pin_threads_ ? devices_[dev].cpus : std::vector<int>(); }

  const TransportOptions options_;
  const std::vector<Device> devices_;
  const bool pin_threads_;
  std::vector<std::shared_ptr<RateLimiter>> rate_limiters_;  // per device; empty: no SIEVE_RATE_LIMIT_MBPS
  std::mutex mutex_;
  std::map<uint64_t, std::unique_ptr<TcpConnect>> connecting_;
  uint64_t last_id_ = 0;
};

}  // namespace

Status Transport::create_tcp(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  Status st = check_options(options);
  if (!st.is_ok()) return st;
  topology::Discovery topo = topology::discover(options.topology);
  if (!topo.ok && !options.topology.xml_file.empty()) {
    // A pinned topology that cannot be read must not stop the job: the live machine still works.
    SIEVE_WARN("topology file %s refused (%s); using the live machine", options.topology.xml_file.c_str(),
               topo.error.c_str());
    topology::Options live = options.topology;
    live.xml_file.clear();
    topo = topology::discover(live);
  }
  for (const auto& note : topo.machine.notes) SIEVE_INFO("topology: %s", note.c_str());
  std::vector<Device> devices;
  st = discover_devices(options.devices, topo.machine, &devices);
  if (!st.is_ok()) return st;
  const bool pin = topology::should_pin(options.pin_threads, topo.machine.numa_nodes.size());
  for (const auto& d : devices)
    SIEVE_INFO("device %s %s speed %d Mbps numa %d%s%s%s%s", d.name.c_str(), d.address.text().c_str(), d.speed_mbps,
               d.numa_node, d.pci_path.empty() ? "" : " pci ", d.pci_path.c_str(),
               pin && !d.cpus.empty() ? ", helper threads on cpus " : "",
               pin ? topology::cpu_list_text(d.cpus).c_str() : "");
  *out = std::make_unique<TcpTransport>(options, std::move(devices), pin);
  return Status::ok();
}

}  // namespace sieve::net
