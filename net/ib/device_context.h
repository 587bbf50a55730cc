// SPDX-License-Identifier: Apache-2.0
// One opened RDMA device and its protection domain, shared by every comm and registration on it;
// the last holder (the transport, a comm, or a registration outliving its comm) closes it.
//
// It also reads the device's asynchronous events, which are the only way some failures are told:
// a fatal device error stops every completion (outstanding work would wait forever), and an event
// that breaks a queue pair or completion queue names it. A port going down is logged and fails
// nothing: as in NCCL, the queue pairs' retry budget (SIEVE_IB_TIMEOUT x SIEVE_IB_RETRY_CNT, 34 s
// by default) decides, so a link flap that RC rides out costs no job, and one that outlasts the
// budget ends in a retry-exceeded completion. There is no thread: the async file descriptor is made
// non-blocking and the comms' progress reads it (at most every kEventInterval per device), so a
// comm that NCCL polls fails within about that long of the event.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/ib/verbs_library.h"
#include "net/status.h"

namespace sieve::net::ib {

class DeviceContext {
 public:
  static constexpr std::chrono::milliseconds kEventInterval{50};

  static Status open(const VerbsLibrary& verbs, ibv_device* device, const std::string& name,
                     std::shared_ptr<DeviceContext>* out);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  const VerbsLibrary& verbs() const { return verbs_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }

  // Whether a comm whose completion queue and queue pairs are `objects` may go on: an error naming
  // the event when the device had a fatal error or an event reported one of the objects broken.
  // Reads the pending events first when kEventInterval has passed since the last read.
  Status health(const std::vector<const void*>& objects);
  // Whether the device had a fatal error: it completes no work any more, flushed or not.
  bool lost();
  // A comm's objects are destroyed: events recorded about them must not fail a later comm that
  // gets the same address.
  void forget(const void* object);

 private:
  DeviceContext(const VerbsLibrary& verbs, std::string name) : verbs_(verbs), name_(std::move(name)) {}
  void read_events();  // with mutex_ held
  void handle(const ibv_async_event& event);

  const VerbsLibrary& verbs_;
  const std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;

  std::mutex mutex_;
  std::chrono::steady_clock::time_point next_read_{};
  std::string fatal_;                          // why the device is lost; empty while it is not
  std::map<const void*, std::string> broken_;  // queue pairs and completion queues an event broke
};

}  // namespace sieve::net::ib
