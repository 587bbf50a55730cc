// SPDX-License-Identifier: Apache-2.0
#include "net/bootstrap.h"

#include <netinet/in.h>

#include "net/log.h"

namespace sieve::net {
namespace {

Status check_device_index(int dev, size_t count) {
  if (dev < 0 || static_cast<size_t>(dev) >= count)
    return error(Code::kInvalidArgument,
                 "device " + std::to_string(dev) + " does not exist (" + std::to_string(count) + " devices)");
  return ok_status();
}

}  // namespace

Status open_bootstrap_listener(const std::vector<Device>& devices, int dev, Handle* handle, BootstrapListener* out) {
  Status st = check_device_index(dev, devices.size());
  if (!st.ok()) return st;
  SocketAddress bound;
  st = make_listener(devices[dev].address, &out->fd, &bound);
  if (!st.ok()) return st;
  wire::HandleFields fields;
  fields.address = bound;
  fields.listener_nonce = random64();
  wire::encode_handle(fields, handle->bytes);
  out->address = bound.text();
  out->nonce = fields.listener_nonce;
  return ok_status();
}

Status read_peer_handle(const std::vector<Device>& devices, int dev, const Handle& handle, wire::HandleFields* out) {
  Status st = check_device_index(dev, devices.size());
  if (!st.ok()) return st;
  st = wire::decode_handle(handle.bytes, out);
  if (!st.ok()) return st;
  const Device& local = devices[dev];
  SocketAddress& remote = out->address;
  if (remote.family() == AF_INET6 && local.address.family() == AF_INET6) {
    auto* r = reinterpret_cast<sockaddr_in6*>(&remote.storage);
    if (IN6_IS_ADDR_LINKLOCAL(&r->sin6_addr))
      r->sin6_scope_id = reinterpret_cast<const sockaddr_in6*>(&local.address.storage)->sin6_scope_id;
  }
  return ok_status();
}

Status check_common_options(const TransportOptions& o) {
  if (o.peer_timeout_ms < 100)
    return error(Code::kInvalidArgument,
                 "SIEVE_PEER_TIMEOUT_MS=" + std::to_string(o.peer_timeout_ms) + " is below 100");
  return ok_status();
}

topology::Machine placement_machine(const topology::Options& options) {
  topology::Discovery topo = topology::discover(options);
  if (!topo.ok && !options.xml_file.empty()) {
    SIEVE_WARN("topology file %s refused (%s); using the live machine", options.xml_file.c_str(), topo.error.c_str());
    topology::Options live = options;
    live.xml_file.clear();
    topo = topology::discover(live);
  }
  for (const auto& note : topo.machine.notes) SIEVE_INFO("topology: %s", note.c_str());
  return topo.machine;
}

Status ConnectAttempts::progress(Handle* handle, const wire::HandleFields& fields,
                                 const std::function<std::unique_ptr<ConnectAttempt>()>& make,
                                 std::unique_ptr<SendComm>* comm) {
  ConnectAttempt* attempt = nullptr;
  uint64_t id = fields.pending_connect;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id != 0) {
      auto it = attempts_.find(id);
      if (it == attempts_.end())
        return error(Code::kInvalidArgument, "handle names a connect attempt this process does not know");
      attempt = it->second.get();
    } else {
      id = ++last_id_;
      attempt = attempts_.emplace(id, make()).first->second.get();
      wire::set_handle_pending(handle->bytes, id);
    }
  }
  // Outside the lock: other connects (other comms of NCCL's proxy thread) progress meanwhile.
  Status st = attempt->progress(comm);
  if (!st.ok() || *comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    attempts_.erase(id);
    wire::set_handle_pending(handle->bytes, 0);
  }
  return st;
}

}  // namespace sieve::net
