// SPDX-License-Identifier: Apache-2.0
// What the verbs transport's tests share: both ends of a connection in this process over the fake
// libibverbs (tests/net/ib/fake_verbs, first in LD_LIBRARY_PATH through ctest), the fake's own
// view of what the transport did (violations, queue-pair attributes, registrations, posted work),
// and the hardware events a test injects. The fake is strict: every test ends by checking that the
// transport broke no verbs rule. Tests run with FAKE_VERBS_VIOLATIONS=report, so a violation a
// test provokes on purpose (a wrong key) becomes the error completion hardware would give.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/transport.h"
#include "tests/net/transport_harness.h"

namespace sieve::net::ib_test {

constexpr unsigned char kCanary = 0xC5;

std::vector<unsigned char> pattern(size_t size, uint32_t seed);
// memcmp for buffers that may be empty (an empty vector's data() may be null, which memcmp may not get).
bool same_bytes(const void* a, const void* b, size_t n);

// The fake's test-only exports, from the copy of libibverbs.so.1 the transport loaded.
namespace fake {
uint64_t violations();  // ~0 when the fake is not the library loaded
int fork_initialized();
std::vector<ibv_qp_attr> qp_attributes();  // every live queue pair of this process
std::vector<ibv_qp_attr> connected_qps();  // those in RTS
int mr_access(const void* address);        // -1: no registration holds it
int live_mrs();                            // memory registrations alive in this process
struct Posted {
  uint64_t requests = 0;
  uint64_t bytes = 0;
};
Posted posted(ibv_wr_opcode opcode);
bool set_port_state(const std::string& device, int port, bool active);
bool device_fatal(const std::string& device);
// Holds (or releases) every RDMA write whose target bytes include `address` at the responder: its
// queue pair stalls while the others deliver (out-of-order delivery across queue pairs).
void hold_writes(const void* address, bool hold);
// Writes a GID entry (null `raw`: empties it), as an address change on the netdev does.
bool set_gid(const std::string& device, int port, int index, const ibv_gid* gid, ibv_gid_type type);
}  // namespace fake

// Sets an environment variable for one scope (FAKE_VERBS_DEVICES: the "hardware" create_ib finds).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

TransportOptions ib_options(int qps = 1);

class IbTransportTest : public ::testing::Test {
 protected:
  // Both ends on one transport.
  void connect(int qps = 1) { connect(ib_options(qps)); }
  void connect(const TransportOptions& options);
  // A listener and a connector on transports of their own (other ports, other settings), the
  // connector in the communicator's `traffic_class`.
  void connect(const TransportOptions& listener, const TransportOptions& connector,
               int traffic_class = kTrafficClassUnset);
  // The same, expecting the connection to fail: its error.
  Status connect_failure(const TransportOptions& listener, const TransportOptions& connector);
  void TearDown() override;

  std::unique_ptr<MemoryRegion> reg_send(const void* data, size_t size);
  std::unique_ptr<MemoryRegion> reg_recv(void* data, size_t size);
  // One message of `size` into a receive of `capacity`; checks the bytes, the sizes and the canary.
  void roundtrip(size_t size, size_t capacity, uint32_t seed);

  std::unique_ptr<Transport> transport_;            // the listener's (and the connector's when shared)
  std::unique_ptr<Transport> connector_transport_;  // null when shared
  testing::Pair pair_;
  uint64_t violations_before_ = 0;
};

}  // namespace sieve::net::ib_test
