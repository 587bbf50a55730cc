// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/plugin_link.h"

#include <dlfcn.h>

#include <thread>

#if __has_include("plugin/sieve.h")
#include "plugin/sieve.h"
#endif

namespace sieve::bench {

namespace {
std::string failed(const char* call, int result) {
  return std::string("plugin ") + call + " failed: " + tools::result_name(result);
}
}  // namespace

std::unique_ptr<PluginLink> PluginLink::open(const std::string& library, std::string* error) {
  std::unique_ptr<PluginLink> link(new PluginLink);
  tools::LoaderOptions options;
  link->net_ = tools::NetPlugin::open(library, options, error);
  if (!link->net_) return nullptr;
  int result = link->net_->init();
  if (result != tools::kNetSuccess) return *error = failed("init", result), nullptr;
  int devices = 0;
  result = link->net_->devices(&devices);
  if (result != tools::kNetSuccess) return *error = failed("devices", result), nullptr;
  if (devices < 1) return *error = "the plugin found no network device (check SIEVE_SOCKET_IFNAME)", nullptr;
  tools::NetDeviceInfo info;
  if (link->net_->properties(0, &info) == tools::kNetSuccess) link->device_name_ = info.name;
  result = link->net_->listen(0, &link->handle_, &link->listen_comm_);
  if (result != tools::kNetSuccess) return *error = failed("listen", result), nullptr;
  // The C API lives in the same library; NCCL never calls it, a trainer (and this bench) may.
  if (void* self = dlopen(link->net_->library().c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    link->stats_symbol_ = dlsym(self, "sieve_stats_get");
    dlclose(self);
  }
  return link;
}

PluginLink::~PluginLink() {
  if (!net_) return;
  close_receiving();
  for (const Region& region : regions_) {
    if (region.send_mhandle) net_->dereg_mr(send_comm_, region.send_mhandle);
  }
  if (send_comm_) net_->close_send(send_comm_);
}

void PluginLink::close_receiving() {
  for (Region& region : regions_) {
    if (region.recv_mhandle) net_->dereg_mr(recv_comm_, region.recv_mhandle);
    region.recv_mhandle = nullptr;
  }
  if (recv_comm_) net_->close_recv(recv_comm_);
  if (listen_comm_) net_->close_listen(listen_comm_);
  recv_comm_ = listen_comm_ = nullptr;
}

std::string PluginLink::connect_ring(const tools::NetHandle& next, std::chrono::steady_clock::time_point deadline) {
  tools::NetHandle handle = next;  // NCCL passes the same handle buffer to every connect call
  while (send_comm_ == nullptr || recv_comm_ == nullptr) {
    if (std::chrono::steady_clock::now() > deadline) {
      return std::string("ring set-up timed out: ") + (send_comm_ ? "" : "no connection to the next node ") +
             (recv_comm_ ? "" : "no connection from the previous node");
    }
    if (send_comm_ == nullptr) {
      const int result = net_->connect(0, &handle, &send_comm_);
      if (result != tools::kNetSuccess) return failed("connect", result);
    }
    if (recv_comm_ == nullptr) {
      const int result = net_->accept(listen_comm_, &recv_comm_);
      if (result != tools::kNetSuccess) return failed("accept", result);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return "";
}

std::string PluginLink::register_region(void* data, size_t bytes) {
  Region region{static_cast<char*>(data), bytes, nullptr, nullptr};
  int result = net_->reg_mr(send_comm_, data, bytes, tools::kPtrHost, &region.send_mhandle);
  if (result != tools::kNetSuccess) return failed("regMr (send)", result);
  result = net_->reg_mr(recv_comm_, data, bytes, tools::kPtrHost, &region.recv_mhandle);
  if (result != tools::kNetSuccess) {
    net_->dereg_mr(send_comm_, region.send_mhandle);
    return failed("regMr (receive)", result);
  }
  regions_.push_back(region);
  return "";
}

const PluginLink::Region* PluginLink::region_of(const void* data, size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  for (const Region& region : regions_) {
    if (p >= region.base && p + bytes <= region.base + region.bytes) return &region;
  }
  return nullptr;
}

std::string PluginLink::post_send(const void* data, size_t bytes, void** request) {
  const Region* region = region_of(data, bytes);
  if (region == nullptr) return "send from unregistered memory";
  const int result = net_->isend(send_comm_, const_cast<void*>(data), bytes, 0, region->send_mhandle, request);
  return result == tools::kNetSuccess ? "" : failed("isend", result);
}

std::string PluginLink::post_recv(void* data, size_t bytes, void** request) {
  const Region* region = region_of(data, bytes);
  if (region == nullptr) return "receive into unregistered memory";
  const int tag = 0;
  void* mhandle = region->recv_mhandle;
  const int result = net_->irecv(recv_comm_, 1, &data, &bytes, &tag, &mhandle, request);
  return result == tools::kNetSuccess ? "" : failed("irecv", result);
}

std::string PluginLink::test(void* request, bool* done, size_t* bytes) {
  int finished = 0;
  int size = 0;
  const int result = net_->test(request, &finished, &size);
  if (result != tools::kNetSuccess) return failed("test", result);
  *done = finished != 0;
  *bytes = static_cast<size_t>(size);
  return "";
}

bool PluginLink::plugin_counters(uint64_t* logical_sent, uint64_t* wire_sent) const {
#if __has_include("plugin/sieve.h")
  // The symbol of the library the nodes loaded, typed by the header it was built from.
  if (stats_symbol_ == nullptr) return false;
  auto get = reinterpret_cast<decltype(&sieve_stats_get)>(stats_symbol_);
  sieve_stats_t stats{};
  stats.size = sizeof stats;
  if (get(&stats) != 0) return false;
  *logical_sent = stats.bytes_logical_sent;
  *wire_sent = stats.bytes_wire_sent;
  return true;
#else
  (void)logical_sent;
  (void)wire_sent;
  return false;
#endif
}

}  // namespace sieve::bench
