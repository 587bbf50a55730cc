// SPDX-License-Identifier: Apache-2.0
// The TCP implementation of Transport: device list, listen, and connect attempts kept by id so the
// handle NCCL passes back can name the attempt in progress.
#include <algorithm>
#include <map>
#include <mutex>

#include "net/bootstrap.h"
#include "net/handshake.h"
#include "net/log.h"
#include "net/tcp/comm.h"
#include "net/transport.h"
#include "net/wire.h"
#include "topology/machine.h"

namespace sieve::net {

namespace {

constexpr size_t kRateBurstChunks = 4;  // the shaper lets this many stripes go out back to back

Status check_options(const TransportOptions& o) {
  if (o.nsocks < 0 || o.nsocks > kMaxSockets)
    return error(Code::kInvalidArgument, "SIEVE_NSOCKS=" + std::to_string(o.nsocks) + " is outside 0-16 (0 = auto)");
  if (o.nthreads < 0 || o.nthreads > kMaxSockets)
    return error(Code::kInvalidArgument,
                 "SIEVE_NTHREADS=" + std::to_string(o.nthreads) + " is outside 0-16 (0 = auto)");
  if (o.chunk_size < 4096 || o.chunk_size > (1u << 30))
    return error(Code::kInvalidArgument, "SIEVE_CHUNK_SIZE=" + std::to_string(o.chunk_size) + " is outside 4K-1G");
  if (o.rate_limit_mbps < 0)
    return error(Code::kInvalidArgument, "SIEVE_RATE_LIMIT_MBPS=" + std::to_string(o.rate_limit_mbps) + " is negative");
  return check_common_options(o);
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
        handshakes_(options, std::move(listener), nonce, std::move(address), Carrier::kTcp) {}

  Status accept(std::unique_ptr<RecvComm>* comm) override {
    comm->reset();
    Connection c;
    bool got = false;
    handshakes_.accept(&c, &got);
    if (!got) return ok_status();
    auto recv = std::make_unique<TcpRecvComm>(std::move(c), comm_options(options_, helper_cpus_, nullptr));
    Status st = recv->start(StripeWorker::Direction::kReceive);
    if (!st.ok()) return st;
    *comm = std::move(recv);
    return ok_status();
  }
  uint64_t take_rejected() override { return handshakes_.take_rejected(); }

 private:
  const TransportOptions options_;
  const std::vector<int> helper_cpus_;
  HandshakeListener handshakes_;
};

// A connect in progress: the shared handshake, then a send comm with the device's helper CPUs and shaper.
struct TcpConnect final : ConnectAttempt {
  TcpConnect(const TransportOptions& o, const wire::HandleFields& handle, std::vector<int> cpus,
             std::shared_ptr<RateLimiter> limiter)
      : options(o),
        connector(o, handle, Carrier::kTcp),
        helper_cpus(std::move(cpus)),
        rate_limiter(std::move(limiter)) {}

  Status progress(std::unique_ptr<SendComm>* comm) override {
    Connection c;
    bool done = false;
    Status st = connector.progress(&c, &done);
    if (!st.ok() || !done) return st;
    auto send = std::make_unique<TcpSendComm>(std::move(c), comm_options(options, helper_cpus, rate_limiter));
    st = send->start(StripeWorker::Direction::kSend);
    if (!st.ok()) return st;
    *comm = std::move(send);
    return ok_status();
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
        rate_limiters_.push_back(
            std::make_shared<RateLimiter>(options.rate_limit_mbps, kRateBurstChunks * options.chunk_size));
  }

  const std::vector<Device>& devices() const override { return devices_; }
  using Transport::connect;

  Status listen(int dev, Handle* handle, std::unique_ptr<ListenComm>* comm) override {
    comm->reset();
    BootstrapListener listener;
    Status st = open_bootstrap_listener(devices_, dev, handle, &listener);
    if (!st.ok()) return st;
    SIEVE_INFO("listening on %s (%s)", listener.address.c_str(), devices_[dev].name.c_str());
    *comm = std::make_unique<TcpListenComm>(options_, std::move(listener.fd), listener.nonce,
                                            std::move(listener.address), helper_cpus(dev));
    return ok_status();
  }

  // The communicator's traffic class has no meaning for TCP here (no DSCP is set on its sockets).
  Status connect(int dev, int /*traffic_class*/, Handle* handle, std::unique_ptr<SendComm>* comm) override {
    comm->reset();
    wire::HandleFields fields;
    Status st = read_peer_handle(devices_, dev, *handle, &fields);
    if (!st.ok()) return st;
    const auto make = [&]() -> std::unique_ptr<ConnectAttempt> {
      // The connecting side picks the shape: the listener takes whatever socket count arrives.
      TransportOptions shaped = options_;
      const StripeShape shape = stripe_shape(options_, devices_[dev].speed_mbps, devices_[dev].pci_vendor);
      shaped.nsocks = shape.nsocks;
      shaped.nthreads = shape.nthreads;
      shaped.progress =
          shape.inline_progress ? TransportOptions::Progress::kInline : TransportOptions::Progress::kHelpers;
      return std::make_unique<TcpConnect>(shaped, fields, helper_cpus(dev),
                                          rate_limiters_.empty() ? nullptr : rate_limiters_[dev]);
    };
    st = attempts_.progress(handle, fields, make, comm);
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
  std::vector<int> helper_cpus(int dev) const { return pin_threads_ ? devices_[dev].cpus : std::vector<int>(); }

  const TransportOptions options_;
  const std::vector<Device> devices_;
  const bool pin_threads_;
  std::vector<std::shared_ptr<RateLimiter>> rate_limiters_;  // per device; empty: no SIEVE_RATE_LIMIT_MBPS
  ConnectAttempts attempts_;
};

}  // namespace

Status Transport::create_tcp(const TransportOptions& options, std::unique_ptr<Transport>* out) {
  Status st = check_options(options);
  if (!st.ok()) return st;
  const topology::Machine machine = placement_machine(options.topology);
  std::vector<Device> devices;
  st = discover_devices(options.devices, machine, &devices);
  if (!st.ok()) return st;
  const bool pin = topology::should_pin(options.pin_threads, machine.numa_nodes.size());
  for (const auto& d : devices)
    SIEVE_INFO("device %s %s speed %d Mbps numa %d%s%s%s%s", d.name.c_str(), d.address.text().c_str(), d.speed_mbps,
               d.numa_node, d.pci_path.empty() ? "" : " pci ", d.pci_path.c_str(),
               pin && !d.cpus.empty() ? ", helper threads on cpus " : "",
               pin ? topology::cpu_list_text(d.cpus).c_str() : "");
  *out = std::make_unique<TcpTransport>(options, std::move(devices), pin);
  return ok_status();
}

}  // namespace sieve::net
