// SPDX-License-Identifier: Apache-2.0
// What a finished handshake hands to a comm: the sockets of one connection and what both sides agreed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/rate_limiter.h"
#include "net/socket.h"
#include "net/status.h"
#include "net/transport.h"

namespace sieve::net {

struct Connection {
  Fd control;               // frame headers and inline payloads, driven by the caller's thread
  std::vector<Fd> data;     // stripes, driven by helper threads
  std::string peer;         // "address:port" for log lines
  uint32_t caps = 0;        // negotiated capability bits
  uint64_t chunk_size = 0;  // the sender's stripe size
};

struct CommOptions {
  std::vector<int> helper_cpus;  // empty: helper threads float; else pinned there (the NIC's CPUs)
  int nthreads = 0;              // 0: auto_nthreads of the connection's socket count
  TransportOptions::Progress progress = TransportOptions::Progress::kAuto;  // resolved by socket count
  size_t inline_threshold = 64 * 1024;
  int peer_timeout_ms = 5000;
  TransportOptions::Codec codec = TransportOptions::Codec::kAuto;  // applies once the peer has kCapZeroElide
  std::shared_ptr<RateLimiter> rate_limiter;                       // the device's; null: unlimited
};

using Clock = std::chrono::steady_clock;

// First error of a comm, shared between the caller's thread and the helper threads. Once failed,
// every pending request reports it. It is logged (with the peer's address) when it first reaches
// the caller, so a peer that closes after the last message, at teardown, logs nothing.
class Failure {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Keeps the first error only; returns true when this call recorded it.
  bool set(const Status& status);
  Status get() const;
  // The recorded error, logged the first time it is handed to the caller.
  Status surface();

 private:
  std::atomic<bool> failed_{false};
  std::atomic<bool> surfaced_{false};
  mutable std::mutex mutex_;
  Status status_;
};

}  // namespace sieve::net
