// SPDX-License-Identifier: Apache-2.0
// The fake's verbs objects. Each one embeds the public libibverbs struct the caller sees (as the
// first member of a standard-layout Shell, so the caller's pointer leads back to it) and is never
// freed: a destroyed object stays as a tombstone, so a caller that keeps using it is caught (a
// VIOLATION) instead of reading freed memory.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tests/net/ib/fake_verbs/device_spec.h"
#include "tests/net/ib/fake_verbs/identity.h"

namespace sieve::fake_verbs {

class Engine;
struct Connection;

template <typename Verbs, typename Impl> struct Shell {
  Verbs verbs;  // first: the caller's pointer is a pointer to the Shell
  Impl* impl;
};

template <typename Impl, typename Verbs> Impl* impl_of(Verbs* verbs) {
  return verbs == nullptr ? nullptr : reinterpret_cast<Shell<Verbs, Impl>*>(verbs)->impl;
}

struct Qp;
struct Context;

// One port of a device: its own addresses and endpoint (the socket its peers' packets arrive at).
struct Port {
  uint8_t number = 1;
  NodeAddress node;  // this port's address index
  uint16_t lid = 0;  // IB only
  // Routed IB (option flid): the LID by which ports in other subnets reach this one through the
  // routers (0xc000 - lid: never the port's own LID in practice), carried in its routable GID at
  // index 1 as NVIDIA's routers define it: fec0:0000:<FLID>:<low 16 bits of the subnet prefix>:GUID.
  uint16_t flid = 0;
  // The GID table: gid_count entries (gid_tbl_len); an entry of zeros is empty (an address removed).
  static constexpr int kMaxGids = 4;
  ibv_gid gids[kMaxGids]{};
  ibv_gid_type gid_types[kMaxGids]{};
  int gid_count = 0;
  bool gid_populated(int index) const;
  int listen_fd = -1;
  bool active = true;  // IBV_PORT_ACTIVE, else DOWN: nothing leaves or arrives through it
  std::chrono::steady_clock::time_point down_since{};
};

struct Device {
  Shell<ibv_device, Device> shell{};
  Engine* engine = nullptr;
  DeviceSpec spec;
  std::vector<Port> ports;                // ports[p - 1] is port p
  std::atomic<bool> fatal{false};         // IBV_EVENT_DEVICE_FATAL: nothing moves any more, nothing new is created
  std::vector<Context*> contexts;         // every context opened on it (closed ones too: check `destroyed`)
  std::unordered_map<uint32_t, Qp*> qps;  // live QPs by QPN
  std::unordered_set<uint32_t> destroyed_qpns;  // a request to one of these is a dead peer, not a bug

  NodeAddress node() const { return ports.front().node; }  // the node GUID is the first port's
  Port* port(int number) {
    return number >= 1 && number <= static_cast<int>(ports.size()) ? &ports[number - 1] : nullptr;
  }
  const Port* port(int number) const { return const_cast<Device*>(this)->port(number); }
  bool rdma_capable() const { return spec.link == LinkLayer::kRoce || spec.link == LinkLayer::kInfiniband; }
};

// Async events of one context; shared with ibv_get_async_event callers so that closing the context
// can wake them without freeing what they wait on.
struct AsyncQueue {
  AsyncQueue();
  ~AsyncQueue();
  void push(const ibv_async_event& event);
  void close();
  bool non_blocking() const;  // the caller made async_fd O_NONBLOCK

  std::mutex mu;
  std::deque<ibv_async_event> events;
  bool closed = false;
  int pipe_fds[2] = {-1, -1};  // one byte per event (and one on close): the context's async_fd
};

// A context is a verbs_context, as real rdma-core always opens: the caller's ibv_context is its last
// member, and verbs.h's inline wrappers (ibv_query_port) take the extended ops in front of it.
struct ContextShell {
  verbs_context verbs;
  Context* impl;
};
Context* context_of(ibv_context* verbs);

struct Context {
  ContextShell shell{};
  Engine* engine = nullptr;
  Device* device = nullptr;
  std::atomic<bool> destroyed{false};
  std::shared_ptr<AsyncQueue> async;  // dropped at close (under the engine lock): no fd outlives it
  int live_pds = 0;
  int live_cqs = 0;
};

struct Pd {
  Shell<ibv_pd, Pd> shell{};
  Context* context = nullptr;
  std::atomic<bool> destroyed{false};
  int live_mrs = 0;
  int live_qps = 0;
};

struct Mr {
  Shell<ibv_mr, Mr> shell{};
  Pd* pd = nullptr;
  std::atomic<bool> destroyed{false};
  uint8_t* host = nullptr;  // where iova maps to in this process
  uint64_t iova = 0;
  size_t length = 0;
  unsigned access = 0;
  int in_flight = 0;  // local work requests and inbound transfers using it right now
  void* dmabuf_mapping = nullptr;
  size_t dmabuf_mapping_length = 0;

  // The host bytes for [address, address + length) in this MR's iova space, or nullptr if outside.
  uint8_t* translate(uint64_t address, uint64_t bytes) const;
};

struct Cq {
  Shell<ibv_cq, Cq> shell{};
  Context* context = nullptr;
  std::atomic<bool> destroyed{false};
  int live_qps = 0;  // guarded by the engine lock

  std::mutex mu;  // guards the entries only, so polling never waits for the engine
  std::deque<ibv_wc> entries;
  // Beside each entry: the send-queue slots polling it frees (qp null for receive completions).
  struct SlotRelease {
    Qp* qp = nullptr;
    uint64_t through = 0;  // the QP's work requests with seq < through
  };
  std::deque<SlotRelease> releases;
  size_t capacity = 0;
};

// A local buffer piece of a work request, already translated to host memory.
struct Piece {
  uint8_t* host;
  size_t length;
};

struct SendWr {
  enum class Stage { kQueued, kSent, kDone };
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  uint32_t imm = 0;  // network order, as given
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
  std::vector<Piece> pieces;                          // gather (send, write) or scatter (read) list
  std::shared_ptr<std::vector<uint8_t>> inline_copy;  // IBV_SEND_INLINE: the bytes at post time
  std::vector<Mr*> pinned;
  Stage stage = Stage::kQueued;
  ibv_wc_status status = IBV_WC_SUCCESS;
  uint64_t seq = 0;
  std::chrono::steady_clock::time_point posted_at{};
};

struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};

struct QpAttrs {
  uint8_t port_num = 0;
  uint16_t pkey_index = 0;
  unsigned access = 0;
  ibv_mtu path_mtu = IBV_MTU_4096;
  uint32_t dest_qp_num = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  ibv_ah_attr ah{};
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t max_rd_atomic = 0;
};

struct Qp {
  Shell<ibv_qp, Qp> shell{};
  Context* context = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  std::atomic<bool> destroyed{false};

  ibv_qp_state state = IBV_QPS_RESET;
  QpAttrs attrs;
  std::deque<SendWr> sq;  // posted, not yet completed, in order
  std::deque<RecvWr> rq;
  uint64_t next_seq = 0;
  // Send-queue slots, as hardware frees them: a work request's slot is reused only once a
  // completion of it or of a later request on the QP has been polled (an unsignaled request has
  // none of its own: a later signaled one frees it). Slots in use: next_seq - sq_released.
  std::atomic<uint64_t> sq_released{0};
  Connection* requester = nullptr;  // our outbound connection to the remote QP
  bool peer_gone = false;           // the remote end vanished while we had nothing outstanding

  Device* device() const { return context->device; }
  // The port the QP was bound to at INIT (port 1 before that).
  Port* port() const { return context->device->port(attrs.port_num == 0 ? 1 : attrs.port_num); }
  uint32_t qpn() const { return shell.verbs.qp_num; }
};

}  // namespace sieve::fake_verbs
