// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "tests/net/ib/fake_verbs/endpoint.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {

// The engine pointer changes only at first use and in a forked child; g_engine_mu orders both, and
// readers on the data path (every poll_cq checks it) take the atomic without the lock.
namespace {
std::mutex g_engine_mu;
std::atomic<Engine*> g_engine{nullptr};
std::vector<Engine*>* g_abandoned = nullptr;  // engines of the parent, kept reachable (never freed)

}  // namespace

void engine_fork_prepare() {
  g_engine_mu.lock();
  if (Engine* engine = g_engine.load()) engine->mu.lock();
}

void engine_fork_parent() {
  if (Engine* engine = g_engine.load()) engine->mu.unlock();
  g_engine_mu.unlock();
}

// The child is a new node: it must not keep the parent's endpoints open (a dead parent would look
// alive) and gets new addresses on its next ibv_get_device_list. The old engine stays locked.
void engine_fork_child() {
  if (Engine* engine = g_engine.load()) {
    engine->abandon_in_child();
    if (g_abandoned == nullptr) g_abandoned = new std::vector<Engine*>();
    g_abandoned->push_back(engine);
    g_engine = nullptr;
  }
  g_engine_mu.unlock();
}

Engine& Engine::current() {
  if (Engine* engine = g_engine.load()) return *engine;
  std::lock_guard<std::mutex> lock(g_engine_mu);
  if (g_engine.load() == nullptr) {
    static bool registered = false;
    if (!registered) {
      pthread_atfork(engine_fork_prepare, engine_fork_parent, engine_fork_child);
      registered = true;
    }
    g_engine = new Engine();
  }
  return *g_engine.load();
}

Engine::Engine() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  key_counter_ = static_cast<uint32_t>(::getpid()) * 2654435761u;
  qpn_counter_ = 0;
}

void Engine::abandon_in_child() {
  for (auto& device : devices_) {
    for (Port& port : device->ports) {
      if (port.listen_fd >= 0) ::close(port.listen_fd);
      port.listen_fd = -1;
    }
  }
  for (auto& conn : connections_) {
    if (conn->fd >= 0) ::close(conn->fd);
    conn->fd = -1;
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

bool owned_here(Engine* engine, const char* what) {
  if (engine == &Engine::current()) return true;
  violation("%s belongs to the parent process (inherited across fork); a child must open its own", what);
  return false;
}

Device* Engine::device_for(const DeviceSpec& spec, std::string* error) {
  for (auto& device : devices_) {
    if (device->spec.key() == spec.key()) return device.get();
  }
  if (next_address_index_ + spec.ports > kMaxDevices) {
    *error = "FAKE_VERBS_DEVICES: more than " + std::to_string(kMaxDevices) + " distinct ports in one process";
    return nullptr;
  }
  auto device = std::make_unique<Device>();
  device->engine = this;
  device->spec = spec;
  for (int number = 1; number <= spec.ports; ++number) {
    Port port;
    port.number = static_cast<uint8_t>(number);
    port.node.pid = static_cast<uint32_t>(::getpid());
    port.node.device_index = next_address_index_ + static_cast<uint32_t>(number - 1);
    port.active = !spec.port_down(number);
    if (!port.active) port.down_since = std::chrono::steady_clock::now();
    if (!open_port(spec, &port, error)) {
      for (Port& opened : device->ports) ::close(opened.listen_fd);
      return nullptr;
    }
    device->ports.push_back(port);
  }
  next_address_index_ += static_cast<uint32_t>(spec.ports);
  ibv_device& verbs = device->shell.verbs;
  switch (spec.link) {
    case LinkLayer::kRoce:
    case LinkLayer::kInfiniband:
      verbs.node_type = IBV_NODE_CA;
      verbs.transport_type = IBV_TRANSPORT_IB;
      break;
    case LinkLayer::kIwarp:
      verbs.node_type = IBV_NODE_RNIC;
      verbs.transport_type = IBV_TRANSPORT_IWARP;
      break;
    case LinkLayer::kEfa:
      verbs.node_type = IBV_NODE_UNSPECIFIED;
      verbs.transport_type = IBV_TRANSPORT_UNSPECIFIED;
      break;
  }
  std::snprintf(verbs.name, sizeof(verbs.name), "%s", spec.name.c_str());
  std::snprintf(verbs.dev_name, sizeof(verbs.dev_name), "uverbs-fake%u", device->node().device_index);
  // dev_path and ibdev_path stay empty: there is no sysfs entry behind a fake device.
  device->shell.impl = device.get();
  devices_.push_back(std::move(device));
  return devices_.back().get();
}

// A port's GID table and endpoint: RoCE has a v1 and a v2 GID and an endpoint named after its
// address; InfiniBand one GID in its subnet and an endpoint named after the LID it claims; EFA and
// iWARP a GID each and an endpoint nobody ever reaches (their QPs never connect here).
bool Engine::open_port(const DeviceSpec& spec, Port* port, std::string* error) {
  if (spec.link == LinkLayer::kRoce) {
    port->gids[0] = guid_gid(kLinkLocalPrefix, port->node);
    port->gid_types[0] = IBV_GID_TYPE_ROCE_V1;
    port->gids[1] = ipv4_mapped_gid(port->node);
    port->gid_types[1] = IBV_GID_TYPE_ROCE_V2;
    port->gid_count = 2;
    if (spec.ipv6) {
      port->gids[2] = guid_gid(kIpv6GlobalPrefix, port->node);
      port->gid_types[2] = IBV_GID_TYPE_ROCE_V2;
      port->gid_count = 3;
    }
    port->listen_fd = listen_endpoint(roce_endpoint_name(port->node));
  } else if (spec.link == LinkLayer::kInfiniband) {
    port->gids[0] = guid_gid(spec.subnet_prefix, port->node);
    port->gid_types[0] = IBV_GID_TYPE_IB;
    port->gid_count = 1;
    uint16_t lid = first_lid_candidate(port->node);
    for (int tries = 0; tries < 0xbfff && port->listen_fd < 0; ++tries) {
      port->listen_fd = listen_endpoint(ib_endpoint_name(lid));
      if (port->listen_fd >= 0) {
        port->lid = lid;
      } else if (errno != EADDRINUSE) {
        break;
      }
      lid = lid == 0xbfff ? 1 : lid + 1;
    }
    if (spec.flid && port->lid != 0) {
      port->flid = static_cast<uint16_t>(0xc000 - port->lid);
      port->gids[1] = routable_gid(spec.subnet_prefix, port->flid, port->node);
      port->gid_types[1] = IBV_GID_TYPE_IB;
      port->gid_count = 2;
    }
  } else {
    port->gids[0] = guid_gid(kLinkLocalPrefix, port->node);
    port->gid_types[0] = IBV_GID_TYPE_IB;
    port->gid_count = 1;
    port->listen_fd = listen_endpoint(roce_endpoint_name(port->node));
  }
  if (port->listen_fd < 0) {
    *error = "cannot open the endpoint of port " + std::to_string(port->number) + " of fake device '" + spec.name +
             "': " + std::strerror(errno);
    return false;
  }
  return true;
}

Device* Engine::device_named(const std::string& name) {
  for (auto& device : devices_) {
    if (device->spec.name == name) return device.get();
  }
  return nullptr;
}

void Engine::set_port_state(Device* device, Port* port, bool active) {
  if (port->active == active) return;
  port->active = active;
  if (!active) port->down_since = std::chrono::steady_clock::now();
  ibv_async_event event{};
  event.event_type = active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  event.element.port_num = port->number;
  for (Context* context : device->contexts) {
    if (!context->destroyed) post_async(context, event);
  }
  wake();
}

void Engine::set_gid(Device* device, Port* port, int index, const ibv_gid* gid, ibv_gid_type type) {
  port->gids[index] = gid ? *gid : ibv_gid{};
  port->gid_types[index] = type;
  if (index >= port->gid_count) port->gid_count = index + 1;
  ibv_async_event event{};
  event.event_type = IBV_EVENT_GID_CHANGE;
  event.element.port_num = port->number;
  for (Context* context : device->contexts) {
    if (!context->destroyed) post_async(context, event);
  }
  wake();
}

void Engine::device_fatal(Device* device) {
  if (device->fatal) return;
  device->fatal = true;
  ibv_async_event event{};
  event.event_type = IBV_EVENT_DEVICE_FATAL;
  for (Context* context : device->contexts) {
    if (!context->destroyed) post_async(context, event);
  }
  wake();
}

std::vector<const Qp*> Engine::live_qps() const {
  std::vector<const Qp*> qps;
  for (const auto& device : devices_) {
    for (const auto& entry : device->qps) qps.push_back(entry.second);
  }
  return qps;
}

int Engine::live_mrs() const {
  int n = 0;
  for (const auto& entry : mrs_by_lkey) n += entry.second->destroyed ? 0 : 1;
  return n;
}

const Mr* Engine::mr_covering(const void* address) const {
  const auto* byte = static_cast<const uint8_t*>(address);
  for (const auto& entry : mrs_by_lkey) {
    const Mr* mr = entry.second;
    if (!mr->destroyed && byte >= mr->host && byte < mr->host + mr->length) return mr;
  }
  return nullptr;
}

uint32_t Engine::new_key() {
  for (;;) {
    key_counter_ += 0x9e3779b9u;
    uint32_t key = key_counter_ ^ (key_counter_ >> 15);
    if (key != 0 && mrs_by_lkey.count(key) == 0 && mrs_by_rkey.count(key) == 0) return key;
  }
}

uint32_t Engine::new_qpn(Device* device) {
  uint32_t base = (static_cast<uint32_t>(::getpid()) & 0xfff) << 12;
  for (;;) {
    uint32_t qpn = (base | (qpn_counter_++ & 0xfff)) & 0xffffff;
    if (qpn > 1 && device->qps.count(qpn) == 0 && device->destroyed_qpns.count(qpn) == 0) return qpn;
  }
}

void Engine::wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void Engine::start_service() {
  if (service_started_) return;
  service_started_ = true;
  std::thread([this] { service_loop(); }).detach();
}

AsyncQueue::AsyncQueue() {
  // The read end is the context's async_fd: blocking, as rdma-core's, until the caller sets
  // O_NONBLOCK; the write end never blocks the engine.
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    pipe_fds[0] = pipe_fds[1] = -1;
    return;
  }
  ::fcntl(pipe_fds[1], F_SETFL, ::fcntl(pipe_fds[1], F_GETFL) | O_NONBLOCK);
}

bool AsyncQueue::non_blocking() const { return (::fcntl(pipe_fds[0], F_GETFL) & O_NONBLOCK) != 0; }

AsyncQueue::~AsyncQueue() {
  for (int fd : pipe_fds) {
    if (fd >= 0) ::close(fd);
  }
}

void AsyncQueue::push(const ibv_async_event& event) {
  std::lock_guard<std::mutex> lock(mu);
  if (closed) return;
  events.push_back(event);
  char byte = 'e';
  (void)!::write(pipe_fds[1], &byte, 1);
}

void AsyncQueue::close() {
  std::lock_guard<std::mutex> lock(mu);
  closed = true;
  char byte = 'c';
  (void)!::write(pipe_fds[1], &byte, 1);
}

bool Port::gid_populated(int index) const {
  static const ibv_gid kEmpty{};
  return index >= 0 && index < gid_count && std::memcmp(&gids[index], &kEmpty, sizeof(kEmpty)) != 0;
}

uint8_t* Mr::translate(uint64_t address, uint64_t bytes) const {
  if (address < iova || bytes > length || address - iova > length - bytes) return nullptr;
  return host + (address - iova);
}

}  // namespace sieve::fake_verbs
