// SPDX-License-Identifier: Apache-2.0
// The ring's two connections through the network plugin, driven as NCCL's proxy drives them:
// non-blocking connect/accept, memory registered once per comm, NULL requests retried, test polled.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/nccl_emulator/plugin_loader.h"
#include "tools/sieve-bench/ring_allreduce.h"

namespace sieve::bench {

class PluginLink : public RingLink {
 public:
  // Loads the plugin and listens on device 0; handle() is what the previous node connects to.
  static std::unique_ptr<PluginLink> open(const std::string& library, std::string* error);
  ~PluginLink() override;

  const tools::NetHandle& handle() const { return handle_; }
  // Connects to the next node and accepts the previous one, alternating (both sides of a ring start
  // at once, so neither may block), until both comms exist or the deadline passes.
  std::string connect_ring(const tools::NetHandle& next, std::chrono::steady_clock::time_point deadline);
  // Registers [data, data + bytes) with both comms; post_* find the region of each pointer.
  std::string register_region(void* data, size_t bytes);

  std::string post_send(const void* data, size_t bytes, void** request) override;
  std::string post_recv(void* data, size_t bytes, void** request) override;
  std::string test(void* request, bool* done, size_t* bytes) override;

  // Closes the receiving side (with its registrations) first: done on every node before any send
  // side closes, no transport sees its peer vanish while it still listens.
  void close_receiving();

  // The plugin's own counters through its C API, when it exports one (false otherwise).
  bool plugin_counters(uint64_t* logical_sent, uint64_t* wire_sent) const;
  const std::string& device_name() const { return device_name_; }

 private:
  PluginLink() = default;
  struct Region {
    char* base;
    size_t bytes;
    void* send_mhandle;
    void* recv_mhandle;
  };
  const Region* region_of(const void* data, size_t bytes) const;

  std::unique_ptr<tools::NetPlugin> net_;
  tools::NetHandle handle_;
  void* listen_comm_ = nullptr;
  void* send_comm_ = nullptr;
  void* recv_comm_ = nullptr;
  std::vector<Region> regions_;
  std::string device_name_;
  void* stats_symbol_ = nullptr;
};

}  // namespace sieve::bench
