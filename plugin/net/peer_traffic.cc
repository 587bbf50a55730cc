// SPDX-License-Identifier: Apache-2.0
#include "plugin/net/peer_traffic.h"

#include <mutex>

namespace sieve::plugin {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<CommTraffic>> comms;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: comms may close during static teardown
  return *r;
}

void bump(std::atomic<uint64_t>& counter, uint64_t amount) { counter.fetch_add(amount, std::memory_order_relaxed); }

}  // namespace

void CommTraffic::posted() {
  if (outstanding_++ == 0) busy_since_ = std::chrono::steady_clock::now();
}

void CommTraffic::completed(const net::Completion& c) {
  if (c.sent) {
    bump(logical_sent_, c.size);
    bump(wire_sent_, c.wire_bytes);
    bump(messages_sent_, 1);
  } else {
    bump(logical_received_, c.size);
    bump(wire_received_, c.wire_bytes);
    bump(messages_received_, 1);
  }
  if (outstanding_ > 0 && --outstanding_ == 0) {
    auto busy = std::chrono::steady_clock::now() - busy_since_;
    bump(busy_ns_, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count()));
  }
}

TrafficCounters CommTraffic::counters() const {
  TrafficCounters t;
  t.bytes_logical_sent = logical_sent_.load(std::memory_order_relaxed);
  t.bytes_wire_sent = wire_sent_.load(std::memory_order_relaxed);
  t.bytes_logical_received = logical_received_.load(std::memory_order_relaxed);
  t.bytes_wire_received = wire_received_.load(std::memory_order_relaxed);
  t.messages_sent = messages_sent_.load(std::memory_order_relaxed);
  t.messages_received = messages_received_.load(std::memory_order_relaxed);
  t.busy_ns = busy_ns_.load(std::memory_order_relaxed);
  return t;
}

std::shared_ptr<CommTraffic> register_comm_traffic(const std::string& device, const std::string& peer) {
  auto traffic = std::make_shared<CommTraffic>(device, peer);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.comms.push_back(traffic);
  return traffic;
}

std::vector<PeerTraffic> peer_traffic() {
  std::vector<std::shared_ptr<CommTraffic>> comms;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    comms = r.comms;
  }
  std::vector<PeerTraffic> out;
  for (const auto& c : comms) {
    PeerTraffic* slot = nullptr;
    for (auto& p : out)
      if (p.device == c->device() && p.peer == c->peer()) slot = &p;
    if (!slot) {
      out.push_back({c->device(), c->peer(), {}});
      slot = &out.back();
    }
    slot->counters += c->counters();
  }
  return out;
}

}  // namespace sieve::plugin
