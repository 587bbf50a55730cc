// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_setup.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/ib/completion_error.h"
#include "net/ib/ib_route.h"
#include "net/log.h"
#include "net/socket.h"

namespace sieve::net::ib {

namespace {

constexpr uint32_t kSetupMagic = 0x51564953;  // "SIVQ"
constexpr uint16_t kSetupVersion = 2;         // 2: service class and P_Key
constexpr size_t kQpsOffset = 32;

void put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool known_mtu(int mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096; }

Status modify(const VerbsLibrary& verbs, ibv_qp* qp, ibv_qp_attr* attr, int mask, const char* step) {
  int rc = verbs.modify_qp(qp, attr, mask);
  if (rc != 0)
    return error(Code::kSystemError,
                 std::string("ibv_modify_qp to ") + step + " failed: " + errno_text(rc > 0 ? rc : errno));
  return ok_status();
}

}  // namespace

void encode_setup(const SetupInfo& info, uint8_t* out) {
  std::memset(out, 0, kSetupBytes);
  put32(out, kSetupMagic);
  put16(out + 4, kSetupVersion);
  out[6] = info.link_layer == LinkLayer::kEthernet ? 1 : 0;
  out[7] = static_cast<uint8_t>(info.mtu);
  put16(out + 8, info.lid);
  put16(out + 10, static_cast<uint16_t>(info.qpn.size()));
  std::memcpy(out + 12, info.gid.raw, 16);
  out[28] = info.service.traffic_class;
  out[29] = info.service.service_level;
  put16(out + 30, info.pkey);
  for (size_t i = 0; i < info.qpn.size() && i < size_t(kMaxQps); ++i) {
    put32(out + kQpsOffset + 8 * i, info.qpn[i]);
    put32(out + kQpsOffset + 4 + 8 * i, info.psn[i]);
  }
}

Status decode_setup(const uint8_t* in, SetupInfo* out) {
  if (get32(in) != kSetupMagic)
    return error(Code::kRemoteError, "queue-pair set-up: bad magic (not a Sieve verbs peer)");
  if (get16(in + 4) != kSetupVersion)
    return error(Code::kRemoteError, "queue-pair set-up: version " + std::to_string(get16(in + 4)) + ", expected " +
                                         std::to_string(kSetupVersion));
  if (in[6] > 1) return error(Code::kRemoteError, "queue-pair set-up: unknown link layer " + std::to_string(in[6]));
  if (!known_mtu(in[7]))
    return error(Code::kRemoteError, "queue-pair set-up: unknown MTU code " + std::to_string(in[7]));
  const uint16_t nqps = get16(in + 10);
  if (nqps < 1 || nqps > kMaxQps)
    return error(Code::kRemoteError, "queue-pair set-up: " + std::to_string(nqps) + " queue pairs (1-16 allowed)");
  if (in[29] > 15)
    return error(Code::kRemoteError, "queue-pair set-up: service level " + std::to_string(in[29]) + " (0-15)");
  out->link_layer = in[6] ? LinkLayer::kEthernet : LinkLayer::kInfiniBand;
  out->mtu = static_cast<ibv_mtu>(in[7]);
  out->lid = get16(in + 8);
  std::memcpy(out->gid.raw, in + 12, 16);
  out->service.traffic_class = in[28];
  out->service.service_level = in[29];
  out->pkey = get16(in + 30);
  out->qpn.resize(nqps);
  out->psn.resize(nqps);
  for (size_t i = 0; i < nqps; ++i) {
    out->qpn[i] = get32(in + kQpsOffset + 8 * i) & 0xffffff;
    out->psn[i] = get32(in + kQpsOffset + 4 + 8 * i) & 0xffffff;
  }
  return ok_status();
}

bool same_partition(uint16_t a, uint16_t b) { return (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000) != 0; }

Status qp_to_init(const VerbsLibrary& verbs, ibv_qp* qp, const PortAddress& local) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = static_cast<uint16_t>(local.pkey_index);
  attr.port_num = static_cast<uint8_t>(local.port);
  attr.qp_access_flags = kRemoteAccess;
  return modify(verbs, qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
}

Status qp_to_rts(const VerbsLibrary& verbs, ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                 const SetupInfo& remote, uint32_t remote_qpn, uint32_t remote_psn, const ServiceClass& service,
                 const RetryBudget& retry) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = std::min(local.mtu, remote.mtu);
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = remote_psn;
  attr.max_dest_rd_atomic = 1;  // the flush's RDMA read on the loopback queue pair
  attr.min_rnr_timer = kQpMinRnrTimer;
  attr.ah_attr.port_num = static_cast<uint8_t>(local.port);
  attr.ah_attr.sl = service.service_level;
  attr.ah_attr.src_path_bits = 0;
  // RoCE has no LIDs: every packet carries a global route header from the chosen GID. InfiniBand
  // routes by LID inside a subnet; a port that requires a GRH (an SR-IOV function, cloud IB) or a
  // peer behind a router in another subnet needs the GRH as well, or RTR is refused or nothing
  // arrives, and across subnets the DLID is the peer's FLID, which the routers forward (ib_route.h).
  const bool infiniband = local.link_layer == LinkLayer::kInfiniBand;
  const bool other_subnet = infiniband && !same_ib_subnet(local.gid, remote.gid);
  bool no_flid = false;
  attr.ah_attr.dlid = infiniband ? destination_lid(local.gid, remote.lid, remote.gid, &no_flid) : 0;
  if (no_flid)
    SIEVE_WARN(
        "%s: the peer's GID %s is in another InfiniBand subnet but carries no FLID; addressing its LID %u, "
        "which only a router without FLID routing delivers",
        local.name.c_str(), gid_text(remote.gid).c_str(), remote.lid);
  if (local.link_layer == LinkLayer::kEthernet || local.grh_required || other_subnet) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(local.gid_index);
    attr.ah_attr.grh.hop_limit = kHopLimit;
    attr.ah_attr.grh.flow_label = 0;
    attr.ah_attr.grh.traffic_class = service.traffic_class;
  }
  Status st = modify(verbs, qp, &attr,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                     "RTR");
  if (!st.ok()) return st;
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = retry.timeout;
  attr.retry_cnt = retry.retry_count;
  attr.rnr_retry = kQpRnrRetry;
  attr.sq_psn = local_psn;
  attr.max_rd_atomic = 1;
  return modify(
      verbs, qp, &attr,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
      "RTS");
}

}  // namespace sieve::net::ib
