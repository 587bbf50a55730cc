// SPDX-License-Identifier: Apache-2.0
#include "tests/net/transport_harness.h"

#include <thread>

namespace sieve::net::testing {

TransportOptions loopback_options() {
  TransportOptions o;
  o.devices.ifname = "=lo";
  o.devices.family = Family::kIPv4;
  o.nsocks = 2;
  o.nthreads = 2;
  o.chunk_size = 128 * 1024;
  o.inline_threshold = 16 * 1024;
  o.peer_timeout_ms = 2000;
  return o;
}

std::unique_ptr<Transport> make_transport(const TransportOptions& options) {
  std::unique_ptr<Transport> t;
  Status st = Transport::create_tcp(options, &t);
  return st.ok() ? std::move(t) : nullptr;
}

Status connect_pair(Transport& listener_side, Transport& connector_side, Pair* pair, int traffic_class) {
  Handle handle;
  std::unique_ptr<ListenComm> listener;
  Status st = listener_side.listen(0, &handle, &listener);
  if (!st.ok()) return st;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pair->send || !pair->recv) {
    if (!pair->send) {
      st = connector_side.connect(0, traffic_class, &handle, &pair->send);
      if (!st.ok()) return st;
    }
    if (!pair->recv) {
      st = listener->accept(&pair->recv);
      if (!st.ok()) return st;
    }
    if (std::chrono::steady_clock::now() > deadline) return error(Code::kInternalError, "connect_pair timed out");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return ok_status();
}

Status wait(Request* request, Completion* done, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    Status st = request->test(done);
    if (!st.ok() || done->done) return st;
    if (std::chrono::steady_clock::now() > end) return error(Code::kInternalError, "request did not finish in time");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status wait_both(Request* a, Completion* da, Request* b, Completion* db, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (!da->done || !db->done) {
    if (!da->done) {
      Status st = a->test(da);
      if (!st.ok()) return st;
    }
    if (!db->done) {
      Status st = b->test(db);
      if (!st.ok()) return st;
    }
    if (std::chrono::steady_clock::now() > end) return error(Code::kInternalError, "requests did not finish in time");
    if (!da->done || !db->done) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return ok_status();
}

}  // namespace sieve::net::testing
