// SPDX-License-Identifier: Apache-2.0
// Helpers for tests that drive both ends of a transport from one thread over loopback.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "net/transport.h"

namespace sieve::net::testing {

TransportOptions loopback_options();
std::unique_ptr<Transport> make_transport(const TransportOptions& options);

struct Pair {
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
};

// Listens, connects (in the communicator's `traffic_class`) and accepts until both comms exist (or a
// bounded deadline passes).
Status connect_pair(Transport& listener_side, Transport& connector_side, Pair* pair,
                    int traffic_class = kTrafficClassUnset);

// Tests a request until done, an error, or the deadline.
Status wait(Request* request, Completion* done, std::chrono::milliseconds deadline = std::chrono::seconds(20));

// Tests two requests (one per side) until both are done.
Status wait_both(Request* a, Completion* da, Request* b, Completion* db,
                 std::chrono::milliseconds deadline = std::chrono::seconds(20));

}  // namespace sieve::net::testing
