// SPDX-License-Identifier: Apache-2.0
// Exports only the fake has, for tests: what the "hardware" saw (violations, queue-pair attributes,
// registration flags, posted work by opcode) and the hardware events a test injects (a port going
// down or up, a device's fatal error). A test finds them with dlsym on the loaded libibverbs.so.1,
// which also proves the fake is the library loaded.
#include <cstring>
#include <string>

#include "tests/net/ib/fake_verbs/api_common.h"
#include "tests/net/ib/fake_verbs/data_path.h"

using namespace sieve::fake_verbs;

// How many VIOLATION lines this process printed.
FAKE_VERBS_API uint64_t fake_verbs_violations(void) { return violation_count(); }

// Whether ibv_fork_init has succeeded in this process.
FAKE_VERBS_API int fake_verbs_fork_initialized(void) { return g_fork_initialized ? 1 : 0; }

// The attributes of every live queue pair of this process (as ibv_query_qp reports them, qp_state
// included), at most `capacity` into `out`; returns how many there are.
FAKE_VERBS_API int fake_verbs_qp_attributes(ibv_qp_attr* out, int capacity) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  const std::vector<const Qp*> qps = engine.live_qps();
  for (int i = 0; i < capacity && i < static_cast<int>(qps.size()); ++i) {
    const Qp& qp = *qps[i];
    const QpAttrs& a = qp.attrs;
    ibv_qp_attr& attr = out[i];
    std::memset(&attr, 0, sizeof(attr));
    attr.qp_state = qp.state;
    attr.path_mtu = a.path_mtu;
    attr.rq_psn = a.rq_psn;
    attr.sq_psn = a.sq_psn;
    attr.dest_qp_num = a.dest_qp_num;
    attr.qp_access_flags = a.access;
    attr.cap = qp.cap;
    attr.ah_attr = a.ah;
    attr.pkey_index = a.pkey_index;
    attr.port_num = a.port_num;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    attr.min_rnr_timer = a.min_rnr_timer;
    attr.max_rd_atomic = a.max_rd_atomic;
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  }
  return static_cast<int>(qps.size());
}

// The access flags a live registration covering `address` (host memory) was made with; -1 if none.
FAKE_VERBS_API int fake_verbs_mr_access(const void* address) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  const Mr* mr = engine.mr_covering(address);
  return mr == nullptr ? -1 : static_cast<int>(mr->access);
}

// Memory registrations alive in this process (each ibv_reg_mr* not yet deregistered).
FAKE_VERBS_API int fake_verbs_live_mrs(void) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  return engine.live_mrs();
}

// Work requests and payload bytes posted with `opcode` (IBV_WR_*) in this process so far.
FAKE_VERBS_API void fake_verbs_posted(int opcode, uint64_t* requests, uint64_t* bytes) {
  posted_so_far(static_cast<ibv_wr_opcode>(opcode), requests, bytes);
}

// Takes port `port` of the device named `device` down (active 0) or up (1), as a cable pull or a
// switch reboot would: IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE to every context open on it,
// nothing moves through the port while it is down, and requests posted on it fail with
// IBV_WC_RETRY_EXC_ERR once their retry budget runs out. 0, or -1 for no such device or port.
FAKE_VERBS_API int fake_verbs_set_port_state(const char* device_name, int port_number, int active) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  Device* device = engine.device_named(device_name);
  Port* port = device == nullptr ? nullptr : device->port(port_number);
  if (port == nullptr) return -1;
  engine.set_port_state(device, port, active != 0);
  return 0;
}

// A fatal error of the device named `device` (firmware crash, PCI error): IBV_EVENT_DEVICE_FATAL to
// every context open on it; from then on nothing moves and nothing completes, and creating objects
// on it fails with EIO. 0, or -1 for no such device.
FAKE_VERBS_API int fake_verbs_device_fatal(const char* device_name) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  Device* device = engine.device_named(device_name);
  if (device == nullptr) return -1;
  engine.device_fatal(device);
  return 0;
}

// Holds (hold 1) or releases (0) every RDMA write whose target bytes include `address` (host memory
// of a registration), at the responder: that QP stalls behind it, as a congested path would, while
// the other QPs' writes land. What a transport splitting messages across QPs must survive.
FAKE_VERBS_API void fake_verbs_hold_writes(const void* address, int hold) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  engine.hold_writes(static_cast<const uint8_t*>(address), hold != 0);
}

// Writes GID entry `index` of port `port_number` of the device named `device`: the 16 bytes at `raw`
// with `type` (IBV_GID_TYPE_*), or an empty entry when `raw` is null, as the kernel does when an
// address is added to or removed from the port's netdev: IBV_EVENT_GID_CHANGE to every context open
// on the device. Queue pairs set up later with an empty source entry are refused. 0, or -1 for no
// such device, port or index.
FAKE_VERBS_API int fake_verbs_set_gid(const char* device_name, int port_number, int index, const void* raw, int type) {
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  Device* device = engine.device_named(device_name);
  Port* port = device == nullptr ? nullptr : device->port(port_number);
  if (port == nullptr || index < 0 || index >= Port::kMaxGids) return -1;
  ibv_gid gid{};
  if (raw != nullptr) std::memcpy(gid.raw, raw, sizeof(gid.raw));
  engine.set_gid(device, port, index, raw == nullptr ? nullptr : &gid, static_cast<ibv_gid_type>(type));
  return 0;
}
