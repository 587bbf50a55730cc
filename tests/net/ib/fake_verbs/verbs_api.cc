// The exported libibverbs entry points (unversioned, the real signatures from <infiniband/verbs.h>).
// Calls real libibverbs rejects up front fail the same way here (errno values, with a note on
// stderr saying why); calls real hardware would accept and then misbehave on are VIOLATIONs.
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/net/ib/fake_verbs/data_path.h"
#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/violation.h"

// verbs.h turns these into inline wrappers; the library exports the plain functions underneath.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define FAKE_VERBS_API extern "C" __attribute__((visibility("default")))

using namespace sieve::fake_verbs;

namespace {

constexpr int kMaxQpWr = 16384;
constexpr int kMaxSge = 32;
constexpr int kMaxCqe = (1 << 22) - 1;
constexpr uint32_t kMaxInline = 256;
constexpr int kMaxRdAtomic = 16;
constexpr uint64_t kMaxMrSize = 1ull << 40;

// A call real libibverbs would reject: errno and a line saying why.
void refuse(const char* format, ...) __attribute__((format(printf, 1, 2)));
void refuse(const char* format, ...) {
  char what[400];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof(what), format, args);
  va_end(args);
  std::fprintf(stderr, "fake-verbs: %s\n", what);
}

Engine* owner(const Context* context) { return context->engine; }
template <typename T>
Engine* owner(const T* object) {
  return object->context->engine;
}

template <typename T>
bool usable(T* object, const char* what) {
  if (object == nullptr) {
    violation("%s is NULL", what);
    return false;
  }
  if (!owned_here(owner(object), what)) return false;
  if (object->destroyed) {
    violation("use of destroyed %s", what);
    return false;
  }
  return true;
}

Engine& engine_of(Context* context) { return *context->engine; }

uint32_t g_handles = 0;  // under the engine lock

// ibv_fork_init as rdma-core keeps it: it must come before the first registration, or it fails.
std::atomic<bool> g_fork_initialized{false};
std::atomic<bool> g_registered_any{false};

ibv_mr* register_mr(ibv_pd* verbs_pd, uint8_t* host, size_t length, uint64_t iova, unsigned access,
                    void* mapping, size_t mapping_length) {
  g_registered_any = true;
  Pd* pd = impl_of<Pd>(verbs_pd);
  if (!usable(pd, "PD")) {
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
  verbs.context = &pd->context->shell.verbs;
  verbs.pd = verbs_pd;
  verbs.addr = mapping != nullptr ? reinterpret_cast<void*>(iova) : host;
  verbs.length = length;
  verbs.handle = ++g_handles;
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
    *required = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC;
    *optional |= rts_optional;
  } else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    *required = IBV_QP_STATE;
    *optional |= rts_optional;
  } else {
    return false;
  }
  return true;
}

// RTR's address vector must name a real remote port of the right kind. errno value (0 = fine).
int check_address_vector(const Qp* qp, const ibv_ah_attr& ah) {
  const Device* device = qp->device();
  if (ah.port_num != 1) {
    refuse("modify_qp(RTR) of QP %u: ah_attr.port_num %u (the device has port 1 only)", qp->qpn(), ah.port_num);
    return EINVAL;
  }
  GidForm form;
  NodeAddress node;
  if (device->spec.link == LinkLayer::kRoce) {
    if (!ah.is_global) {
      violation("RTR of RoCE QP %u without a GRH (is_global 0): RoCE addresses peers by GID", qp->qpn());
      return EINVAL;
    }
    if (ah.grh.sgid_index >= device->gid_count) {
      refuse("modify_qp(RTR) of QP %u: sgid_index %u beyond the GID table (%d entries)", qp->qpn(),
             ah.grh.sgid_index, device->gid_count);
      return EINVAL;
    }
    bool v2 = device->gid_types[ah.grh.sgid_index] == IBV_GID_TYPE_ROCE_V2;
    if (!decode_gid(ah.grh.dgid, &form, &node)) {
      violation("GID mismatch: RTR dgid %s of QP %u is no port GID of a fake device",
                format_gid(ah.grh.dgid).c_str(), qp->qpn());
      return EINVAL;
    }
    if (v2 != (form == GidForm::kIpv4Mapped)) {
      violation("GID type mismatch: QP %u's sgid_index %u is a RoCE v%d GID but dgid %s is a RoCE v%d GID",
                qp->qpn(), ah.grh.sgid_index, v2 ? 2 : 1, format_gid(ah.grh.dgid).c_str(), v2 ? 1 : 2);
      return EINVAL;
    }
    return 0;
  }
  if (ah.dlid == 0 || ah.dlid >= 0xc000) {
    violation("LID mismatch: RTR of IB QP %u with dlid %u (no unicast LID)", qp->qpn(), ah.dlid);
    return EINVAL;
  }
  if (ah.is_global && (!decode_gid(ah.grh.dgid, &form, &node) || form != GidForm::kLinkLocal)) {
    violation("GID mismatch: RTR dgid %s of IB QP %u is no port GID of a fake device",
              format_gid(ah.grh.dgid).c_str(), qp->qpn());
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
    refuse("modify_qp of QP %u %s -> %s: attr_mask 0x%x lacks 0x%x or has extra 0x%x", qp->qpn(),
           qp_state_name(from), qp_state_name(to), mask, required & ~mask, mask & ~(required | optional));
    return EINVAL;
  }
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) {
    refuse("modify_qp of QP %u: port_num %u (the device has port 1 only)", qp->qpn(), attr->port_num);
    return EINVAL;
  }
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) {
    refuse("modify_qp of QP %u: pkey_index %u (the P_Key table has one entry)", qp->qpn(), attr->pkey_index);
    return EINVAL;
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (attr->qp_access_flags & ~unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_ATOMIC}) != 0) {
    refuse("modify_qp of QP %u: qp_access_flags 0x%x", qp->qpn(), attr->qp_access_flags);
    return EINVAL;
  }
  if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) {
    refuse("modify_qp of QP %u: path_mtu %d beyond the port's active_mtu (4096)", qp->qpn(), attr->path_mtu);
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
// Devices

FAKE_VERBS_API ibv_device** ibv_get_device_list(int* num_devices) {
  std::vector<DeviceSpec> specs;
  std::string error;
  if (!parse_device_specs(std::getenv("FAKE_VERBS_DEVICES"), &specs, &error)) {
    std::fprintf(stderr, "fake-verbs: %s\n", error.c_str());
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = Engine::current();
  std::lock_guard<std::mutex> lock(engine.mu);
  std::vector<Device*> devices;
  for (const DeviceSpec& spec : specs) {
    Device* device = engine.device_for(spec, &error);
    if (device == nullptr) {
      std::fprintf(stderr, "fake-verbs: %s\n", error.c_str());
      errno = ENODEV;
      return nullptr;
    }
    devices.push_back(device);
  }
  auto** list = static_cast<ibv_device**>(std::calloc(devices.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devices.size(); ++i) list[i] = &devices[i]->shell.verbs;
  if (num_devices != nullptr) *num_devices = static_cast<int>(devices.size());
  return list;
}

FAKE_VERBS_API void ibv_free_device_list(ibv_device** list) { std::free(list); }

FAKE_VERBS_API const char* ibv_get_device_name(ibv_device* device) { return device->name; }

FAKE_VERBS_API __be64 ibv_get_device_guid(ibv_device* device) {
  return htobe64(node_guid(impl_of<Device>(device)->node));
}

FAKE_VERBS_API ibv_context* ibv_open_device(ibv_device* verbs_device) {
  Device* device = impl_of<Device>(verbs_device);
  if (device == nullptr || !owned_here(device->engine, "a device")) {
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = *device->engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  Context* context = engine.keep(std::make_unique<Context>());
  context->shell.impl = context;
  context->engine = &engine;
  context->device = device;
  context->async = std::make_shared<AsyncQueue>();
  ibv_context& verbs = context->shell.verbs;
  verbs.device = verbs_device;
  verbs.ops.poll_cq = poll_cq;
  verbs.ops.req_notify_cq = req_notify_cq;
  verbs.ops.post_send = post_send;
  verbs.ops.post_recv = post_recv;
  verbs.cmd_fd = -1;
  verbs.async_fd = context->async->pipe_fds[0];
  verbs.num_comp_vectors = 1;
  pthread_mutex_init(&verbs.mutex, nullptr);
  verbs.abi_compat = nullptr;  // not a verbs_context: inline wrappers take their legacy paths
  engine.start_service();
  return &verbs;
}

FAKE_VERBS_API int ibv_close_device(ibv_context* verbs_context) {
  Context* context = impl_of<Context>(verbs_context);
  if (!owned_here(context->engine, "a context")) return -1;
  std::lock_guard<std::mutex> lock(context->engine->mu);
  if (context->destroyed) {
    violation("close of an already closed context");
    errno = EINVAL;
    return -1;
  }
  if (context->live_pds > 0 || context->live_cqs > 0) {
    violation("context of %s closed with %d PDs and %d CQs still allocated", context->device->spec.name.c_str(),
              context->live_pds, context->live_cqs);
    errno = EBUSY;
    return -1;
  }
  context->destroyed = true;
  context->async->close();  // wakes waiters; they keep the queue alive until they return
  context->async.reset();   // and its pipe closes with the last of them
  return 0;
}

FAKE_VERBS_API int ibv_query_device(ibv_context* verbs_context, ibv_device_attr* attr) {
  Context* context = impl_of<Context>(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake-verbs 1.0");
  attr->node_guid = htobe64(node_guid(context->device->node));
  attr->sys_image_guid = attr->node_guid;
  attr->max_mr_size = kMaxMrSize;
  attr->page_size_cap = 0xfffff000;
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = kMaxQpWr;
  attr->max_sge = kMaxSge;
  attr->max_sge_rd = kMaxSge;
  attr->max_cq = 1 << 16;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = kMaxRdAtomic;
  attr->max_qp_init_rd_atom = kMaxRdAtomic;
  attr->max_res_rd_atom = kMaxRdAtomic << 16;
  attr->atomic_cap = IBV_ATOMIC_NONE;
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = 1;
  return 0;
}

// Fills the prefix of ibv_port_attr that every ABI version has (up to link_layer): the caller's
// struct may be the old, shorter one.
FAKE_VERBS_API int ibv_query_port(ibv_context* verbs_context, uint8_t port_num, _compat_ibv_port_attr* out) {
  Context* context = impl_of<Context>(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  if (port_num != 1) return EINVAL;
  const Device* device = context->device;
  ibv_port_attr attr{};
  attr.state = IBV_PORT_ACTIVE;
  attr.max_mtu = IBV_MTU_4096;
  attr.active_mtu = IBV_MTU_4096;
  attr.gid_tbl_len = device->gid_count;
  attr.port_cap_flags = device->spec.link == LinkLayer::kRoce ? IBV_PORT_IP_BASED_GIDS : 0;
  attr.max_msg_sz = 1u << 31;
  attr.pkey_tbl_len = 1;
  attr.lid = device->lid;
  attr.sm_lid = device->spec.link == LinkLayer::kInfiniband ? 1 : 0;
  attr.max_vl_num = 1;
  attr.active_width = device->spec.active_width;
  attr.active_speed = device->spec.active_speed;
  attr.phys_state = 5;  // LinkUp
  attr.link_layer = device->spec.link == LinkLayer::kRoce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  std::memcpy(out, &attr, offsetof(ibv_port_attr, flags));
  return 0;
}

FAKE_VERBS_API int ibv_query_gid(ibv_context* verbs_context, uint8_t port_num, int index, ibv_gid* gid) {
  Context* context = impl_of<Context>(verbs_context);
  if (!usable(context, "context")) return -1;
  if (port_num != 1 || index < 0 || index >= context->device->gid_count) {
    errno = EINVAL;
    return -1;
  }
  *gid = context->device->gids[index];
  return 0;
}

FAKE_VERBS_API int _ibv_query_gid_ex(ibv_context* verbs_context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  Context* context = impl_of<Context>(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry) || port_num != 1) return EINVAL;
  const Device* device = context->device;
  if (gid_index >= static_cast<uint32_t>(device->gid_count)) return ENODATA;
  std::memset(entry, 0, entry_size);
  entry->gid = device->gids[gid_index];
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = device->gid_types[gid_index];
  entry->ndev_ifindex = device->spec.link == LinkLayer::kRoce ? device->spec.ifindex : 0;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

FAKE_VERBS_API ibv_pd* ibv_alloc_pd(ibv_context* verbs_context) {
  Context* context = impl_of<Context>(verbs_context);
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
  pd->shell.verbs.handle = ++g_handles;
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

FAKE_VERBS_API ibv_cq* ibv_create_cq(ibv_context* verbs_context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  Context* context = impl_of<Context>(verbs_context);
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
  verbs.handle = ++g_handles;
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
    refuse("create_qp: caps send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u beyond %d/%d/%d/%d/%u, or CQs "
           "of another context",
           cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data, kMaxQpWr,
           kMaxQpWr, kMaxSge, kMaxSge, kMaxInline);
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
  verbs.context = &pd->context->shell.verbs;
  verbs.qp_context = init->qp_context;
  verbs.pd = verbs_pd;
  verbs.send_cq = init->send_cq;
  verbs.recv_cq = init->recv_cq;
  verbs.handle = ++g_handles;
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

// ---------------------------------------------------------------------------------------------
// Async events and the rest

// rdma-core: EINVAL once memory has been registered without it (too late to protect that memory).
FAKE_VERBS_API int ibv_fork_init(void) {
  if (g_fork_initialized) return 0;
  if (g_registered_any) {
    refuse("ibv_fork_init after memory was registered");
    return EINVAL;
  }
  g_fork_initialized = true;
  return 0;
}

// Blocks until an event arrives or the context is closed (then -1).
FAKE_VERBS_API int ibv_get_async_event(ibv_context* verbs_context, ibv_async_event* event) {
  Context* context = impl_of<Context>(verbs_context);
  std::shared_ptr<AsyncQueue> queue;
  {
    std::lock_guard<std::mutex> lock(context->engine->mu);
    queue = context->async;
  }
  if (queue == nullptr) {
    errno = ENODEV;  // already closed
    return -1;
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(queue->mu);
      if (!queue->events.empty()) {
        *event = queue->events.front();
        queue->events.pop_front();
        char byte;
        (void)!::read(queue->pipe_fds[0], &byte, 1);
        return 0;
      }
      if (queue->closed) {
        errno = ENODEV;
        return -1;
      }
    }
    pollfd ready{queue->pipe_fds[0], POLLIN, 0};
    ::poll(&ready, 1, -1);
  }
}

FAKE_VERBS_API void ibv_ack_async_event(ibv_async_event*) {}

// Test-only: whether ibv_fork_init has succeeded in this process.
FAKE_VERBS_API int fake_verbs_fork_initialized(void) { return g_fork_initialized ? 1 : 0; }

// Test-only: how many VIOLATION lines this process printed.
FAKE_VERBS_API uint64_t fake_verbs_violations(void) { return violation_count(); }
