#include "tests/net/ib/fake_verbs/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {

// The engine pointer changes only at first use and in a forked child; g_engine_mu orders both, and
// readers on the data path (every poll_cq checks it) take the atomic without the lock.
namespace {
std::mutex g_engine_mu;
std::atomic<Engine*> g_engine{nullptr};
std::vector<Engine*>* g_abandoned = nullptr;  // engines of the parent, kept reachable (never freed)

int bind_abstract(const std::string& name) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

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
    if (device->listen_fd >= 0) ::close(device->listen_fd);
    device->listen_fd = -1;
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
  if (devices_.size() >= kMaxDevices) {
    *error = "FAKE_VERBS_DEVICES: more than " + std::to_string(kMaxDevices) + " distinct devices in one process";
    return nullptr;
  }
  auto device = std::make_unique<Device>();
  device->engine = this;
  device->spec = spec;
  device->node.pid = static_cast<uint32_t>(::getpid());
  device->node.device_index = static_cast<uint32_t>(devices_.size());
  if (spec.link == LinkLayer::kRoce) {
    device->gids[0] = link_local_gid(device->node);
    device->gid_types[0] = IBV_GID_TYPE_ROCE_V1;
    device->gids[1] = ipv4_mapped_gid(device->node);
    device->gid_types[1] = IBV_GID_TYPE_ROCE_V2;
    device->gid_count = 2;
    device->listen_fd = bind_abstract(roce_endpoint_name(device->node));
  } else {
    device->gids[0] = link_local_gid(device->node);
    device->gid_types[0] = IBV_GID_TYPE_IB;
    device->gid_count = 1;
    uint16_t lid = first_lid_candidate(device->node);
    for (int tries = 0; tries < 0xbfff && device->listen_fd < 0; ++tries) {
      device->listen_fd = bind_abstract(ib_endpoint_name(lid));
      if (device->listen_fd >= 0) {
        device->lid = lid;
      } else if (errno != EADDRINUSE) {
        break;
      }
      lid = lid == 0xbfff ? 1 : lid + 1;
    }
  }
  if (device->listen_fd < 0) {
    *error = "cannot open the endpoint of fake device '" + spec.name + "': " + std::strerror(errno);
    return nullptr;
  }
  ibv_device& verbs = device->shell.verbs;
  verbs.node_type = IBV_NODE_CA;
  verbs.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(verbs.name, sizeof(verbs.name), "%s", spec.name.c_str());
  std::snprintf(verbs.dev_name, sizeof(verbs.dev_name), "uverbs-fake%u", device->node.device_index);
  // dev_path and ibdev_path stay empty: there is no sysfs entry behind a fake device.
  device->shell.impl = device.get();
  devices_.push_back(std::move(device));
  return devices_.back().get();
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
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) pipe_fds[0] = pipe_fds[1] = -1;
}

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

uint8_t* Mr::translate(uint64_t address, uint64_t bytes) const {
  if (address < iova || bytes > length || address - iova > length - bytes) return nullptr;
  return host + (address - iova);
}

}  // namespace sieve::fake_verbs
