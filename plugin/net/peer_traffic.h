// SPDX-License-Identifier: Apache-2.0
// Traffic per connection (device, peer), for the telemetry snapshot's per-peer and per-device
// tables. Each comm the plugin opens registers one entry; its counters outlive the comm so a
// snapshot taken at exit still shows what every connection carried.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/transport.h"
#include "plugin/telemetry.h"

namespace sieve::plugin {

class CommTraffic {
 public:
  CommTraffic(std::string device, std::string peer) : device_(std::move(device)), peer_(std::move(peer)) {}

  // Called from the comm's own thread (NCCL drives one comm from one thread).
  void posted();
  void completed(const net::Completion& c);

  const std::string& device() const { return device_; }
  const std::string& peer() const { return peer_; }
  TrafficCounters counters() const;  // any thread

 private:
  const std::string device_;
  const std::string peer_;
  std::atomic<uint64_t> logical_sent_{0}, wire_sent_{0}, logical_received_{0}, wire_received_{0};
  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0}, busy_ns_{0};
  int outstanding_ = 0;
  std::chrono::steady_clock::time_point busy_since_{};
};

std::shared_ptr<CommTraffic> register_comm_traffic(const std::string& device, const std::string& peer);

// Every connection so far, merged by (device, peer), in first-seen order.
std::vector<PeerTraffic> peer_traffic();

}  // namespace sieve::plugin
