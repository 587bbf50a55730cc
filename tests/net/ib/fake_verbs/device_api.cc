// SPDX-License-Identifier: Apache-2.0
// The exported entry points about devices and ports: listing, opening (an extended verbs_context,
// as real rdma-core always returns), device, port, GID and P_Key queries, async events, fork safety.
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/net/ib/fake_verbs/api_common.h"
#include "tests/net/ib/fake_verbs/data_path.h"

// verbs.h turns this into an inline wrapper; the library exports the compat function underneath.
#undef ibv_query_port

using namespace sieve::fake_verbs;

namespace {

constexpr int kMaxQpWr = 16384;
constexpr int kMaxSge = 32;
constexpr int kMaxCqe = (1 << 22) - 1;
constexpr int kMaxRdAtomic = 16;
constexpr uint64_t kMaxMrSize = 1ull << 40;

ibv_mtu mtu_enum(int bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

uint8_t link_layer_of(LinkLayer link) {
  switch (link) {
    case LinkLayer::kRoce:
    case LinkLayer::kIwarp: return IBV_LINK_LAYER_ETHERNET;
    case LinkLayer::kInfiniband: return IBV_LINK_LAYER_INFINIBAND;
    case LinkLayer::kEfa: break;
  }
  return IBV_LINK_LAYER_UNSPECIFIED;
}

// Everything a port reports, extended fields included. Under the engine lock.
void describe_port(const Device& device, const Port& port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  attr->state = port.active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = mtu_enum(device.spec.active_mtu);
  attr->gid_tbl_len = port.gid_count;
  attr->port_cap_flags = device.spec.link == LinkLayer::kRoce ? IBV_PORT_IP_BASED_GIDS : 0;
  attr->max_msg_sz = static_cast<uint32_t>(device.spec.max_msg_sz);
  attr->pkey_tbl_len = static_cast<uint16_t>(device.spec.pkeys.size());
  attr->lid = port.lid;
  attr->sm_lid = device.spec.link == LinkLayer::kInfiniband ? 1 : 0;
  attr->max_vl_num = 1;
  attr->active_width = device.spec.active_width;
  attr->active_speed = device.spec.active_speed;
  attr->phys_state = port.active ? 5 : 3;  // LinkUp, Disabled
  attr->link_layer = link_layer_of(device.spec.link);
  attr->flags = device.spec.grh_required ? IBV_QPF_GRH_REQUIRED : 0;  // only the extended query fills it
}

// The port a query names, or null (EINVAL) for one the device does not have.
Port* queried_port(Context* context, uint32_t port_num) { return context->device->port(static_cast<int>(port_num)); }

// verbs_context::query_port, which verbs.h's inline ibv_query_port calls: the full attributes.
int extended_query_port(ibv_context* verbs_context, uint8_t port_num, ibv_port_attr* out, size_t out_length) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const Port* port = queried_port(context, port_num);
  if (port == nullptr) return EINVAL;
  ibv_port_attr attr;
  describe_port(*context->device, *port, &attr);
  std::memcpy(out, &attr, std::min(out_length, sizeof(attr)));
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
  return htobe64(node_guid(impl_of<Device>(device)->node()));
}

FAKE_VERBS_API ibv_context* ibv_open_device(ibv_device* verbs_device) {
  Device* device = impl_of<Device>(verbs_device);
  if (device == nullptr || !owned_here(device->engine, "a device")) {
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = *device->engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  if (device->fatal) {
    refuse("open_device(%s): the device had a fatal error", device->spec.name.c_str());
    errno = EIO;
    return nullptr;
  }
  Context* context = engine.keep(std::make_unique<Context>());
  context->shell.impl = context;
  context->engine = &engine;
  context->device = device;
  context->async = std::make_shared<AsyncQueue>();
  device->contexts.push_back(context);
  verbs_context& extended = context->shell.verbs;
  extended.sz = sizeof(verbs_context);
  extended.query_port = extended_query_port;
  ibv_context& verbs = extended.context;
  verbs.device = verbs_device;
  verbs.ops.poll_cq = poll_cq;
  verbs.ops.req_notify_cq = req_notify_cq;
  verbs.ops.post_send = post_send;
  verbs.ops.post_recv = post_recv;
  verbs.cmd_fd = -1;
  verbs.async_fd = context->async->pipe_fds[0];
  verbs.num_comp_vectors = 1;
  pthread_mutex_init(&verbs.mutex, nullptr);
  verbs.abi_compat = __VERBS_ABI_IS_EXTENDED;
  engine.start_service();
  return &verbs;
}

FAKE_VERBS_API int ibv_close_device(ibv_context* verbs_context) {
  Context* context = context_of(verbs_context);
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
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const Device* device = context->device;
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake-verbs 1.0");
  attr->node_guid = htobe64(node_guid(device->node()));
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
  attr->max_pkeys = static_cast<uint16_t>(device->spec.pkeys.size());
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = static_cast<uint8_t>(device->ports.size());
  return 0;
}

// The compat symbol under the ibv_query_port macro: only the prefix every ABI version has (up to
// link_layer), as rdma-core's; the caller's struct may be the old, shorter one. Callers that want
// the rest (flags: GRH required) go through the extended op, as verbs.h's inline wrapper does.
FAKE_VERBS_API int ibv_query_port(ibv_context* verbs_context, uint8_t port_num, _compat_ibv_port_attr* out) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const Port* port = queried_port(context, port_num);
  if (port == nullptr) return EINVAL;
  ibv_port_attr attr;
  describe_port(*context->device, *port, &attr);
  std::memcpy(out, &attr, offsetof(ibv_port_attr, flags));
  return 0;
}

FAKE_VERBS_API int ibv_query_gid(ibv_context* verbs_context, uint8_t port_num, int index, ibv_gid* gid) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return -1;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const Port* port = queried_port(context, port_num);
  if (port == nullptr || index < 0 || index >= port->gid_count) {
    errno = EINVAL;
    return -1;
  }
  *gid = port->gids[index];
  return 0;
}

FAKE_VERBS_API int _ibv_query_gid_ex(ibv_context* verbs_context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return EINVAL;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const Port* port = queried_port(context, port_num);
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry) || port == nullptr) return EINVAL;
  if (gid_index >= static_cast<uint32_t>(port->gid_count) || !port->gid_populated(static_cast<int>(gid_index)))
    return ENODATA;
  std::memset(entry, 0, entry_size);
  entry->gid = port->gids[gid_index];
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = port->gid_types[gid_index];
  entry->ndev_ifindex = context->device->spec.ifindex;
  return 0;
}

// 0 and the P_Key (network order) at `index`, or -1 with errno, as rdma-core's.
FAKE_VERBS_API int ibv_query_pkey(ibv_context* verbs_context, uint8_t port_num, int index, __be16* pkey) {
  Context* context = context_of(verbs_context);
  if (!usable(context, "context")) return -1;
  std::lock_guard<std::mutex> lock(engine_of(context).mu);
  const std::vector<uint16_t>& table = context->device->spec.pkeys;
  if (queried_port(context, port_num) == nullptr || index < 0 || index >= static_cast<int>(table.size())) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(table[index]);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Async events and fork safety

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

// Blocks until an event arrives or the context is closed (then -1). With the context's async_fd
// made non-blocking (fcntl), returns -1 with EAGAIN instead of waiting, as rdma-core's read does.
FAKE_VERBS_API int ibv_get_async_event(ibv_context* verbs_context, ibv_async_event* event) {
  Context* context = context_of(verbs_context);
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
    if (queue->non_blocking()) {
      errno = EAGAIN;
      return -1;
    }
    pollfd ready{queue->pipe_fds[0], POLLIN, 0};
    ::poll(&ready, 1, -1);
  }
}

FAKE_VERBS_API void ibv_ack_async_event(ibv_async_event*) {}
