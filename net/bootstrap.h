// SPDX-License-Identifier: Apache-2.0
// What every transport does to start a connection, kept in one place: a listening socket whose
// address and nonce travel in the handle, connect attempts found again by the id NCCL carries back
// in that handle, device index checks, and the machine devices are placed on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/devices.h"
#include "net/socket.h"
#include "net/transport.h"
#include "net/wire.h"
#include "topology/discover.h"

namespace sieve::net {

struct BootstrapListener {
  Fd fd;
  std::string address;  // "host:port", for log lines
  uint64_t nonce = 0;   // a connector must present it (from the handle) before anything else
};

// Listens on devices[dev]'s address (an ephemeral port) and writes address and a fresh nonce into the
// handle. InvalidArgument, naming the index and the count, when `dev` is not one of `devices`.
Status open_bootstrap_listener(const std::vector<Device>& devices, int dev, Handle* handle, BootstrapListener* out);

// The connecting side's reading of a handle: the listener's address and nonce, with a link-local
// IPv6 address scoped to the interface of devices[dev], ours (the listener's interface index names an
// interface of its own host). InvalidArgument when `dev` is not one of `devices`.
Status read_peer_handle(const std::vector<Device>& devices, int dev, const Handle& handle, wire::HandleFields* out);

// Options every transport shares; the error names the variable.
Status check_common_options(const TransportOptions& options);

// The machine devices are placed on: SIEVE_TOPO_FILE's, or the live one when that file is refused
// (a pinned topology that cannot be read must not stop the job; the refusal is logged).
topology::Machine placement_machine(const topology::Options& options);

// One connection being established from the connecting side, moved a step per call.
class ConnectAttempt {
 public:
  virtual ~ConnectAttempt() = default;
  // *comm is set once the connection is ready; an error ends the attempt.
  virtual Status progress(std::unique_ptr<SendComm>* comm) = 0;
};

// Connect attempts in progress. NCCL calls connect again with the same handle until a comm comes
// back; the attempt's id travels in the handle, and the attempt is forgotten once it ends.
class ConnectAttempts {
 public:
  // Progresses the attempt the handle names, made by `make` on the first call.
  Status progress(Handle* handle, const wire::HandleFields& fields,
                  const std::function<std::unique_ptr<ConnectAttempt>()>& make, std::unique_ptr<SendComm>* comm);

 private:
  std::mutex mutex_;
  std::map<uint64_t, std::unique_ptr<ConnectAttempt>> attempts_;
  uint64_t last_id_ = 0;
};

}  // namespace sieve::net
