// SPDX-License-Identifier: Apache-2.0
// What two verbs endpoints tell each other over the authenticated bootstrap socket before any RDMA,
// and the queue-pair state transitions that use it. One fixed-size, little-endian, validated
// message per side (the listener answers the connector's), then one "ready" byte per side once its
// queue pairs are in RTS with receives posted, so nothing is ever sent to a queue pair that cannot
// take it yet.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/ib/ib_devices.h"
#include "net/ib/verbs_library.h"
#include "net/status.h"

namespace sieve::net::ib {

constexpr int kMaxQps = 16;  // SIEVE_IB_QPS's upper bound

// The local port a comm uses, as resolved when the transport started.
struct PortAddress {
  std::string name;  // "mlx5_0:1", for messages
  int port = 1;
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  uint16_t lid = 0;
  bool grh_required = false;  // InfiniBand: the port routes nothing without a GRH
  int gid_index = 0;
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_1024;
  int pkey_index = 0;      // SIEVE_IB_PKEY
  uint16_t pkey = 0xffff;  // the P_Key at that index
};

// The class of service of one connection: chosen by the connector, adopted by the listener (so both
// directions, data and acknowledgements, travel in one class), sent in the set-up message.
struct ServiceClass {
  uint8_t traffic_class = 0;  // GRH traffic class: DSCP << 2 | ECN on RoCE
  uint8_t service_level = 0;  // 0-15: the virtual lane (IB), the priority (RoCE without DSCP)
};

struct SetupInfo {
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  ibv_mtu mtu = IBV_MTU_1024;
  uint16_t lid = 0;
  ibv_gid gid{};
  ServiceClass service;  // the connector's choice; the listener answers with what it adopted
  uint16_t pkey = 0xffff;
  std::vector<uint32_t> qpn;  // one per queue pair, 1..kMaxQps
  std::vector<uint32_t> psn;  // initial packet sequence number of each, 24 bits
};

constexpr size_t kSetupBytes = 4 + 2 + 1 + 1 + 2 + 2 + 16 + 1 + 1 + 2 + kMaxQps * 8;
void encode_setup(const SetupInfo& info, uint8_t* out);
// Error names what is wrong (magic, version, queue-pair count, link layer, MTU, service level).
Status decode_setup(const uint8_t* in, SetupInfo* out);

// Whether two P_Keys let their queue pairs talk: the same partition (low 15 bits) and at least one
// full member (bit 15); two limited members never can.
bool same_partition(uint16_t a, uint16_t b);

// How long a queue pair retries a peer that does not acknowledge before its work completes with
// "retry exceeded": retry_count + 1 tries of 4.096 us x 2^timeout each. NCCL's defaults (20 and 7:
// about 4.3 s per try, 34 s in all) ride out a switch reboot or a link renegotiation; a dead peer
// is reported sooner by the bootstrap socket (closed by the kernel when a process dies, keepalive
// for a vanished host) and a port going down by the device's async event.
struct RetryBudget {
  uint8_t timeout = 20;     // SIEVE_IB_TIMEOUT, 1-31 (0, "forever", is not offered)
  uint8_t retry_count = 7;  // SIEVE_IB_RETRY_CNT, 0-7
};

// Attributes every queue pair of the transport uses, in one place. rnr_retry 7 (retry forever) is
// safe because receives are always posted ahead of anything that consumes them.
constexpr uint8_t kQpRnrRetry = 7;
constexpr uint8_t kQpMinRnrTimer = 12;
constexpr uint8_t kHopLimit = 255;
constexpr unsigned kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// RESET -> INIT on the local port, in its partition.
Status qp_to_init(const VerbsLibrary& verbs, ibv_qp* qp, const PortAddress& local);
// INIT -> RTR -> RTS towards the remote queue pair (RoCE: global route from the local GID index;
// InfiniBand: the remote LID, and a global route too where the local port requires one or the
// peer is in another subnet), in the connection's service class. Path MTU is the smaller of both
// ports'; the retry budget is this side's.
Status qp_to_rts(const VerbsLibrary& verbs, ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                 const SetupInfo& remote, uint32_t remote_qpn, uint32_t remote_psn, const ServiceClass& service,
                 const RetryBudget& retry);

}  // namespace sieve::net::ib
