// SPDX-License-Identifier: Apache-2.0
// The process-wide state of the fake: the device registry, every verbs object, and the service
// thread that moves RC traffic between QPs (in this process or another one on the machine) over
// unix sockets (endpoint.h). One mutex guards it all except CQ entries (see Cq::mu), so polling a CQ
// never waits for the service thread. A forked child gets a fresh Engine (new pid, new addresses);
// objects it inherited belong to the old one and using them is a violation.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/net/ib/fake_verbs/connection.h"
#include "tests/net/ib/fake_verbs/objects.h"

namespace sieve::fake_verbs {

class Engine {
 public:
  // The engine of this process, created on first use.
  static Engine& current();

  std::mutex mu;

  // --- under mu ---
  // The device for `spec`, registering it (and claiming its addresses) on first sight.
  Device* device_for(const DeviceSpec& spec, std::string* error);

  template <typename T> T* keep(std::unique_ptr<T> object);  // the engine owns every object until the process ends

  uint32_t new_key();  // lkey/rkey values: distinct in this process, unlike those of another process
  uint32_t new_qpn(Device* device);

  std::unordered_map<uint32_t, Mr*> mrs_by_lkey;
  std::unordered_map<uint32_t, Mr*> mrs_by_rkey;

  void start_service();  // idempotent
  void wake();

  // Hardware events (test_hooks.cc injects them), under mu: every context open on the device gets
  // the async event (IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE, IBV_EVENT_DEVICE_FATAL).
  Device* device_named(const std::string& name);
  void set_port_state(Device* device, Port* port, bool active);
  void device_fatal(Device* device);
  int live_mrs() const;  // with mu held
  // Writes GID entry `index` of `port` (null: empties it), with IBV_EVENT_GID_CHANGE to every context.
  void set_gid(Device* device, Port* port, int index, const ibv_gid* gid, ibv_gid_type type);
  std::vector<const Qp*> live_qps() const;
  // Out-of-order delivery across QPs (test_hooks.cc): a write whose target bytes hold a held
  // address waits at its responder, and with it everything behind it on that QP, while other QPs'
  // writes land; released, it goes on. Real QPs are independent streams: nothing orders one QP's
  // placement against another's.
  void hold_writes(const uint8_t* address, bool hold);
  bool write_held(const uint8_t* host, uint64_t length) const;
  const Mr* mr_covering(const void* address) const;  // a live MR whose host bytes hold `address`

  // RC engine entry points (service.cc), under mu.
  void enter_error(Qp* qp);  // flushes both queues, drops its connections
  void reset_qp(Qp* qp);     // drops everything without completions
  void complete_sends(Qp* qp);
  // `sq_qp`: a send completion, whose polling frees `sq_qp`'s slots up to work request `seq`.
  void push_completion(Cq* cq, const ibv_wc& wc, Qp* sq_qp = nullptr, uint64_t seq = 0);
  void post_async(Context* context, const ibv_async_event& event);
  void drop_connections_of(Qp* qp, bool flush_responses);

 private:
  Engine();
  friend void engine_fork_prepare();
  friend void engine_fork_parent();
  friend void engine_fork_child();

  void service_loop();
  void progress();
  void accept_on(Device* device, Port* port);
  void open_requester(Qp* qp);
  void transmit(Qp* qp);
  void pump_requester(Connection* conn);
  void pump_responder(Connection* conn);
  bool start_request(Connection* conn);
  void finish_request(Connection* conn);
  bool check_hello(Connection* conn);
  void on_response(Connection* conn);
  void requester_lost(Connection* conn);
  void retry_while_port_down(Qp* qp);
  bool receiver_not_ready(Connection* conn);
  bool cut_off(const Connection* conn) const;
  void wake_at(std::chrono::steady_clock::time_point when);  // the loop runs again by then
  void fail_head(Qp* qp, ibv_wc_status status);
  void nak(Connection* conn, ibv_wc_status status, const std::string& text, bool responder_to_error);
  void close_connection(Connection* conn);
  void abandon_in_child();
  bool open_port(const DeviceSpec& spec, Port* port, std::string* error);

  std::vector<const uint8_t*> held_;  // addresses whose writes wait (hold_writes)
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::shared_ptr<void>> objects_;  // every Context/Pd/Mr/Cq/Qp ever made
  uint32_t key_counter_ = 0;
  uint32_t qpn_counter_ = 0;
  uint32_t next_address_index_ = 0;  // ports take consecutive address indices
  int wake_fd_ = -1;
  std::chrono::steady_clock::time_point next_deadline_ = std::chrono::steady_clock::time_point::max();
  bool service_started_ = false;
};

template <typename T> T* Engine::keep(std::unique_ptr<T> object) {
  T* raw = object.get();
  objects_.push_back(std::shared_ptr<T>(std::move(object)));
  return raw;
}

// The engine an object belongs to is this process's: false (after reporting a violation) for an
// object inherited across fork().
bool owned_here(Engine* engine, const char* what);

}  // namespace sieve::fake_verbs
