// SPDX-License-Identifier: Apache-2.0
// The exported entry points for protection domains, memory regions, completion queues and queue
// pairs (unversioned, the real signatures from <infiniband/verbs.h>). Calls real libibverbs rejects
// up front fail the same way here (errno values, with a note on stderr saying why); calls real
// hardware would accept and then misbehave on are VIOLATIONs.
#include <endian.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/net/ib/fake_verbs/api_common.h"
#include "tests/net/ib/fake_verbs/data_path.h"

// verbs.h turns these into inline wrappers; the library exports the plain functions underneath.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace sieve::fake_verbs;

namespace {

constexpr int kMaxQpWr = 16384;
constexpr int kMaxSge = 32;
constexpr int kMaxCqe = (1 << 22) - 1;
constexpr uint32_t kMaxInline = 256;
constexpr int kMaxRdAtomic = 16;
constexpr uint64_t kMaxMrSize = 1ull << 40;

// With fork safety on, rdma-core marks every page a registration touches "don't fork": a forked
// child (a DataLoader worker) gets no copy of them, so whatever else shares those pages (the heap
// around a small buffer) is gone in the child on kernels before 5.13. Registering memory that does
// not own its pages is a bug the hardware never reports.
bool shares_pages(const uint8_t* host, size_t length) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return reinterpret_cast<uintptr_t>(host) % page != 0 || length % page != 0;
}

ibv_mr* register_mr(ibv_pd* verbs_pd, uint8_t* host, size_t length, uint64_t iova, unsigned access, void* mapping,
                    size_t mapping_length) {
  g_registered_any = true;
  Pd* pd = impl_of<Pd>(verbs_pd);
  if (!usable(pd, "PD")) {
    errno = EINVAL;
    return nullptr;
  }
  if (g_fork_initialized && mapping == nullptr && shares_pages(host, length)) {
    violation(
        "reg_mr of [%p, +%zu) with fork safety on: not whole pages, so a forked child loses the memory "
        "sharing them (register page-aligned, page-rounded memory)",
        static_cast<void*>(host), length);
    errno = EINVAL;
    return nullptr;
  }
  const unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
  if ((access & ~known) != 0 ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    refuse("reg_mr: access flags 0x%x are unsupported or ask for remote write without IBV_ACCESS_LOCAL_WRITE", access);
    errno = EINVAL;
    return nullptr;
  }
  if (host == nullptr || length == 0 || length > kMaxMrSize) {
    refuse("reg_mr: address %p, length %zu", static_cast<void*>(host), length);
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = engine_of(pd->context);
  std::lock_guard<std::mutex> lock(engine.mu);
  Mr* mr = engine.keep(std::make_unique<Mr>());
  mr->shell.impl = mr;
  mr->pd = pd;
  mr->host = host;
  mr->iova = iova;
  mr->length = length;
  mr->access = access;
  mr->dmabuf_mapping = mapping;
  mr->dmabuf_mapping_length = mapping_length;
  ibv_mr& verbs = mr->shell.verbs;
  verbs.context = &pd->context->shell.verbs.context;
  verbs.pd = verbs_pd;
  verbs.addr = mapping != nullptr ? reinterpret_cast<void*>(iova) : host;
  verbs.length = length;
  verbs.handle = next_handle();
  verbs.lkey = engine.new_key();
  engine.mrs_by_lkey[verbs.lkey] = mr;
  verbs.rkey = engine.new_key();
  engine.mrs_by_rkey[verbs.rkey] = mr;
  ++pd->live_mrs;
  return &verbs;
}

const char* qp_state_name(int state) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state >= IBV_QPS_RESET && state <= IBV_QPS_ERR ? kNames[state] : "UNKNOWN";
}

// The attribute masks real hardware requires (and allows) for an RC transition (IB spec 11.2.4.2).
bool transition_masks(ibv_qp_state from, ibv_qp_state to, int* required, int* optional) {
  const int rts_optional = IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
  *optional = IBV_QP_CUR_STATE;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    *required = IBV_QP_STATE;
    return true;
  }
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    *required = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    *required = IBV_QP_STATE;
    *optional |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    *required = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    *optional |= IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    *required =
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    *optional |= rts_optional;
  } else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    *required = IBV_QP_STATE;
    *optional |= rts_optional;
  } else {
    return false;
  }
  return true;
}

// RTR's address vector must name a real remote port of the right kind, from the QP's own port,
// and carry a GRH where the port requires one. errno value (0 = fine).
int check_address_vector(const Qp* qp, const ibv_ah_attr& ah) {
  const Device* device = qp->device();
  const Port* port = qp->port();
  if (ah.port_num != port->number) {
    refuse("modify_qp(RTR) of QP %u: ah_attr.port_num %u, but the QP is on port %u", qp->qpn(), ah.port_num,
           port->number);
    return EINVAL;
  }
  if (device->spec.link == LinkLayer::kIwarp) {
    refuse("modify_qp(RTR) of iWARP QP %u: iWARP connections are made through rdma_cm, not by address vector",
           qp->qpn());
    return EOPNOTSUPP;
  }
  if (ah.is_global && ah.grh.sgid_index >= port->gid_count) {
    refuse("modify_qp(RTR) of QP %u: sgid_index %u beyond the GID table (%d entries)", qp->qpn(), ah.grh.sgid_index,
           port->gid_count);
    return EINVAL;
  }
  // As the kernel refuses an address vector whose source GID entry is empty (its address was removed).
  if (ah.is_global && !port->gid_populated(ah.grh.sgid_index)) {
    refuse("modify_qp(RTR) of QP %u: sgid_index %u is an empty GID entry", qp->qpn(), ah.grh.sgid_index);
    return EINVAL;
  }
  GidForm form;
  NodeAddress node;
  if (device->spec.link == LinkLayer::kRoce) {
    if (!ah.is_global) {
      violation("RTR of RoCE QP %u without a GRH (is_global 0): RoCE addresses peers by GID", qp->qpn());
      return EINVAL;
    }
    bool v2 = port->gid_types[ah.grh.sgid_index] == IBV_GID_TYPE_ROCE_V2;
    if (!decode_gid(ah.grh.dgid, &form, &node)) {
      violation("GID mismatch: RTR dgid %s of QP %u is no port GID of a fake device", format_gid(ah.grh.dgid).c_str(),
                qp->qpn());
      return EINVAL;
    }
    // RoCE v1 GIDs are link-local here; IPv4-mapped and global IPv6 ones are RoCE v2.
    if (v2 != (form == GidForm::kIpv4Mapped || !is_link_local(ah.grh.dgid))) {
      violation("GID type mismatch: QP %u's sgid_index %u is a RoCE v%d GID but dgid %s is a RoCE v%d GID", qp->qpn(),
                ah.grh.sgid_index, v2 ? 2 : 1, format_gid(ah.grh.dgid).c_str(), v2 ? 1 : 2);
      return EINVAL;
    }
    return 0;
  }
  if (ah.dlid == 0 || ah.dlid >= 0xc000) {
    violation("LID mismatch: RTR of IB QP %u with dlid %u (no unicast LID)", qp->qpn(), ah.dlid);
    return EINVAL;
  }
  // As the kernel refuses it for an SR-IOV function or a cloud IB port: its packets need a GRH.
  if (device->spec.grh_required && !ah.is_global) {
    refuse("modify_qp(RTR) of IB QP %u: port %u requires a GRH (IBV_QPF_GRH_REQUIRED) and ah_attr.is_global is 0",
           qp->qpn(), port->number);
    return EINVAL;
  }
  if (ah.is_global && (!decode_gid(ah.grh.dgid, &form, &node) || form != GidForm::kGuidBased)) {
    violation("GID mismatch: RTR dgid %s of IB QP %u is no port GID of a fake device", format_gid(ah.grh.dgid).c_str(),
              qp->qpn());
    return EINVAL;
  }
  return 0;
}

int modify_qp_locked(Engine& engine, Qp* qp, const ibv_qp_attr* attr, int mask) {
  if (!(mask & IBV_QP_STATE)) {
    refuse("modify_qp of QP %u without IBV_QP_STATE (the fake only changes states)", qp->qpn());
    return EINVAL;
  }
  ibv_qp_state from = qp->state;
  ibv_qp_state to = attr->qp_state;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != from) {
    refuse("modify_qp of QP %u: cur_qp_state %s but the QP is in %s", qp->qpn(), qp_state_name(attr->cur_qp_state),
           qp_state_name(from));
    return EINVAL;
  }
  int required = 0;
  int optional = 0;
  if (!transition_masks(from, to, &required, &optional)) {
    refuse("modify_qp of QP %u: no transition %s -> %s", qp->qpn(), qp_state_name(from), qp_state_name(to));
    return EINVAL;
  }
  if ((mask & required) != required || (mask & ~(required | optional)) != 0) {
    refuse("modify_qp of QP %u %s -> %s: attr_mask 0x%x lacks 0x%x or has extra 0x%x", qp->qpn(), qp_state_name(from),
           qp_state_name(to), mask, required & ~mask, mask & ~(required | optional));
    return EINVAL;
  }
  const Device* device = qp->device();
  if ((mask & IBV_QP_PORT) && device->port(attr->port_num) == nullptr) {
    refuse("modify_qp of QP %u: port_num %u (the device has %zu port(s))", qp->qpn(), attr->port_num,
           device->ports.size());
    return EINVAL;
  }
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index >= device->spec.pkeys.size()) {
    refuse("modify_qp of QP %u: pkey_index %u beyond the P_Key table (%zu entries)", qp->qpn(), attr->pkey_index,
           device->spec.pkeys.size());
    return EINVAL;
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (attr->qp_access_flags & ~unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_ATOMIC}) != 0) {
    refuse("modify_qp of QP %u: qp_access_flags 0x%x", qp->qpn(), attr->qp_access_flags);
    return EINVAL;
  }
  const int active_mtu_bytes = device->spec.active_mtu;
  if ((mask & IBV_QP_PATH_MTU) &&
      (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096 || (128 << attr->path_mtu) > active_mtu_bytes)) {
    refuse("modify_qp of QP %u: path_mtu %d beyond the port's active_mtu (%d bytes)", qp->qpn(), attr->path_mtu,
           active_mtu_bytes);
    return EINVAL;
  }
  if (((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > kMaxRdAtomic) ||
      ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > kMaxRdAtomic)) {
    refuse("modify_qp of QP %u: RDMA read depth above the device's %d", qp->qpn(), kMaxRdAtomic);
    return EINVAL;
  }
  if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff) {
    refuse("modify_qp of QP %u: dest_qp_num %u is not a 24-bit QPN", qp->qpn(), attr->dest_qp_num);
    return EINVAL;
  }
  if (mask & IBV_QP_AV) {
    int error = check_address_vector(qp, attr->ah_attr);
    if (error != 0) return error;
  }

  QpAttrs& a = qp->attrs;
  if (mask & IBV_QP_PORT) a.port_num = attr->port_num;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_ACCESS_FLAGS) a.access = attr->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) a.rq_psn = attr->rq_psn & 0xffffff;
  if (mask & IBV_QP_SQ_PSN) a.sq_psn = attr->sq_psn & 0xffffff;
  if (mask & IBV_QP_AV) a.ah = attr->ah_attr;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr->max_rd_atomic;

  if (to == IBV_QPS_ERR) {
    engine.enter_error(qp);
  } else {
    if (to == IBV_QPS_RESET) engine.reset_qp(qp);
    qp->state = to;
    qp->shell.verbs.state = to;
  }
  engine.wake();
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

FAKE_VERBS_API ibv_pd* ibv_alloc_pd(ibv_context* verbs_context) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) {
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = engine_of(context);
  std::lock_guard<std::mutex> lock(engine.mu);
  Pd* pd = engine.keep(std::make_unique<Pd>());
  pd->shell.impl = pd;
  pd->context = context;
  pd->shell.verbs.context = verbs_context;
  pd->shell.verbs.handle = next_handle();
  ++context->live_pds;
  return &pd->shell.verbs;
}

FAKE_VERBS_API int ibv_dealloc_pd(ibv_pd* verbs_pd) {
  Pd* pd = impl_of<Pd>(verbs_pd);
  if (!usable(pd, "PD")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(pd->context).mu);
  if (pd->live_mrs > 0 || pd->live_qps > 0) return EBUSY;
  pd->destroyed = true;
  --pd->context->live_pds;
  return 0;
}

FAKE_VERBS_API ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return register_mr(pd, static_cast<uint8_t*>(addr), length, reinterpret_cast<uintptr_t>(addr),
                     static_cast<unsigned>(access), nullptr, 0);
}

FAKE_VERBS_API ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  return register_mr(pd, static_cast<uint8_t*>(addr), length, iova, access, nullptr, 0);
}

// The fd is mapped here (a memfd in tests stands in for a dma-buf) and the mapping registered at iova.
// fd -1 fails with EBADF, which is how callers probe for dma-buf support.
FAKE_VERBS_API ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                         int access) {
  if (fd < 0) {
    errno = EBADF;
    return nullptr;
  }
  if (length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t start = offset & ~(page - 1);
  size_t mapped = length + (offset - start);
  void* mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (mapping == MAP_FAILED) return nullptr;  // errno from mmap
  ibv_mr* mr = register_mr(pd, static_cast<uint8_t*>(mapping) + (offset - start), length, iova,
                           static_cast<unsigned>(access), mapping, mapped);
  if (mr == nullptr) {
    int saved = errno;
    ::munmap(mapping, mapped);
    errno = saved;
  }
  return mr;
}

FAKE_VERBS_API int ibv_dereg_mr(ibv_mr* verbs_mr) {
  Mr* mr = impl_of<Mr>(verbs_mr);
  if (mr == nullptr || !usable(mr->pd, "PD of an MR")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(mr->pd->context).mu);
  if (mr->destroyed) {
    violation("dereg_mr of an MR already deregistered (lkey 0x%x)", verbs_mr->lkey);
    return EINVAL;
  }
  if (mr->in_flight > 0) {
    violation("dereg_mr of MR lkey 0x%x while %d work requests or inbound transfers use it", verbs_mr->lkey,
              mr->in_flight);
    return EBUSY;
  }
  Engine& engine = engine_of(mr->pd->context);
  mr->destroyed = true;
  engine.mrs_by_lkey.erase(verbs_mr->lkey);
  engine.mrs_by_rkey.erase(verbs_mr->rkey);
  --mr->pd->live_mrs;
  if (mr->dmabuf_mapping != nullptr) ::munmap(mr->dmabuf_mapping, mr->dmabuf_mapping_length);
  mr->dmabuf_mapping = nullptr;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Completion queues and queue pairs

FAKE_VERBS_API ibv_cq* ibv_create_cq(ibv_context* verbs_context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                     int comp_vector) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) {
    errno = EINVAL;
    return nullptr;
  }
  if (cqe < 1 || cqe > kMaxCqe || comp_vector != 0) {
    refuse("create_cq: cqe %d (1..%d), comp_vector %d (0 only)", cqe, kMaxCqe, comp_vector);
    errno = EINVAL;
    return nullptr;
  }
  if (channel != nullptr) {
    refuse("create_cq: completion channels are not emulated; poll the CQ");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Engine& engine = engine_of(context);
  std::lock_guard<std::mutex> lock(engine.mu);
  Cq* cq = engine.keep(std::make_unique<Cq>());
  cq->shell.impl = cq;
  cq->context = context;
  cq->capacity = static_cast<size_t>(cqe);
  ibv_cq& verbs = cq->shell.verbs;
  verbs.context = verbs_context;
  verbs.cq_context = cq_context;
  verbs.handle = next_handle();
  verbs.cqe = cqe;
  pthread_mutex_init(&verbs.mutex, nullptr);
  pthread_cond_init(&verbs.cond, nullptr);
  ++context->live_cqs;
  return &verbs;
}

FAKE_VERBS_API int ibv_destroy_cq(ibv_cq* verbs_cq) {
  Cq* cq = impl_of<Cq>(verbs_cq);
  if (!usable(cq, "CQ")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(cq->context).mu);
  if (cq->live_qps > 0) return EBUSY;
  cq->destroyed = true;
  --cq->context->live_cqs;
  return 0;
}

FAKE_VERBS_API ibv_qp* ibv_create_qp(ibv_pd* verbs_pd, ibv_qp_init_attr* init) {
  Pd* pd = impl_of<Pd>(verbs_pd);
  if (!usable(pd, "PD")) {
    errno = EINVAL;
    return nullptr;
  }
  if (init->qp_type != IBV_QPT_RC || init->srq != nullptr) {
    refuse("create_qp: only RC QPs without an SRQ are emulated (qp_type %d)", init->qp_type);
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (pd->context->device->spec.link == LinkLayer::kEfa) {
    refuse("create_qp on %s: an EFA device has no RC queue pairs (SRD and UD only)",
           pd->context->device->spec.name.c_str());
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (pd->context->device->fatal) {
    refuse("create_qp on %s: the device had a fatal error", pd->context->device->spec.name.c_str());
    errno = EIO;
    return nullptr;
  }
  Cq* send_cq = impl_of<Cq>(init->send_cq);
  Cq* recv_cq = impl_of<Cq>(init->recv_cq);
  if (!usable(send_cq, "send CQ") || !usable(recv_cq, "receive CQ")) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_qp_cap& cap = init->cap;
  if (send_cq->context != pd->context || recv_cq->context != pd->context || cap.max_send_wr < 1 ||
      cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInline) {
    refuse(
        "create_qp: caps send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u beyond %d/%d/%d/%d/%u, or CQs "
        "of another context",
        cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data, kMaxQpWr, kMaxQpWr,
        kMaxSge, kMaxSge, kMaxInline);
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = engine_of(pd->context);
  std::lock_guard<std::mutex> lock(engine.mu);
  Qp* qp = engine.keep(std::make_unique<Qp>());
  qp->shell.impl = qp;
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  qp->cap = cap;  // exactly what was asked for: the fake never grants more, so overruns show
  qp->sq_sig_all = init->sq_sig_all != 0;
  ibv_qp& verbs = qp->shell.verbs;
  verbs.context = &pd->context->shell.verbs.context;
  verbs.qp_context = init->qp_context;
  verbs.pd = verbs_pd;
  verbs.send_cq = init->send_cq;
  verbs.recv_cq = init->recv_cq;
  verbs.handle = next_handle();
  verbs.qp_num = engine.new_qpn(pd->context->device);
  verbs.state = IBV_QPS_RESET;
  verbs.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&verbs.mutex, nullptr);
  pthread_cond_init(&verbs.cond, nullptr);
  pd->context->device->qps[verbs.qp_num] = qp;
  ++pd->live_qps;
  ++send_cq->live_qps;
  ++recv_cq->live_qps;
  return &verbs;
}

FAKE_VERBS_API int ibv_modify_qp(ibv_qp* verbs_qp, ibv_qp_attr* attr, int attr_mask) {
  Qp* qp = impl_of<Qp>(verbs_qp);
  if (!usable(qp, "QP")) return EINVAL;
  Engine& engine = engine_of(qp->context);
  std::lock_guard<std::mutex> lock(engine.mu);
  if (qp->device()->fatal && attr->qp_state != IBV_QPS_ERR && attr->qp_state != IBV_QPS_RESET) {
    refuse("modify_qp of QP %u: the device had a fatal error", qp->qpn());
    return EIO;
  }
  return modify_qp_locked(engine, qp, attr, attr_mask);
}

FAKE_VERBS_API int ibv_query_qp(ibv_qp* verbs_qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  Qp* qp = impl_of<Qp>(verbs_qp);
  if (!usable(qp, "QP")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(qp->context).mu);
  const QpAttrs& a = qp->attrs;
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = qp->state;
  attr->cur_qp_state = qp->state;
  attr->path_mtu = a.path_mtu;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qp_access_flags = a.access;
  attr->cap = qp->cap;
  attr->ah_attr = a.ah;
  attr->pkey_index = a.pkey_index;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  std::memset(init, 0, sizeof(*init));
  init->qp_context = verbs_qp->qp_context;
  init->send_cq = verbs_qp->send_cq;
  init->recv_cq = verbs_qp->recv_cq;
  init->cap = qp->cap;
  init->qp_type = IBV_QPT_RC;
  init->sq_sig_all = qp->sq_sig_all;
  return 0;
}

FAKE_VERBS_API int ibv_destroy_qp(ibv_qp* verbs_qp) {
  Qp* qp = impl_of<Qp>(verbs_qp);
  if (!usable(qp, "QP")) return EINVAL;
  Engine& engine = engine_of(qp->context);
  std::lock_guard<std::mutex> lock(engine.mu);
  engine.reset_qp(qp);
  qp->destroyed = true;
  Device* device = qp->device();
  device->qps.erase(qp->qpn());
  device->destroyed_qpns.insert(qp->qpn());
  --qp->pd->live_qps;
  --qp->send_cq->live_qps;
  --qp->recv_cq->live_qps;
  engine.wake();
  return 0;
}
