// SPDX-License-Identifier: Apache-2.0
#include "net/ib/verbs_library.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "net/log.h"

namespace sieve::net::ib {

namespace {

constexpr const char* kLibrary = "libibverbs.so.1";

// Resolves `name` into `slot`; required symbols missing make the whole table unusable.
template <typename Fn> bool bind(void* handle, const char* name, Fn*& slot, bool required, std::string* missing) {
  slot = reinterpret_cast<Fn*>(dlsym(handle, name));
  if (!slot && required && missing->empty()) *missing = name;
  return slot != nullptr;
}

Status load_once(VerbsLibrary* v) {
  dlerror();
  // RTLD_NODELETE: providers start threads and keep state in the library; it must outlive every
  // context, including ones a crashed teardown never closed.
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    return error(Code::kSystemError, std::string(kLibrary) + " could not be loaded (" + (why ? why : "unknown reason") +
                                         "); install rdma-core's libibverbs1 and the provider for the NIC");
  }
  std::string missing;
  bind(handle, "ibv_get_device_list", v->get_device_list, true, &missing);
  bind(handle, "ibv_free_device_list", v->free_device_list, true, &missing);
  bind(handle, "ibv_get_device_name", v->get_device_name, true, &missing);
  bind(handle, "ibv_get_device_guid", v->get_device_guid, true, &missing);
  bind(handle, "ibv_open_device", v->open_device, true, &missing);
  bind(handle, "ibv_close_device", v->close_device, true, &missing);
  bind(handle, "ibv_query_device", v->query_device, true, &missing);
  bind(handle, "ibv_query_port", v->query_port, true, &missing);
  bind(handle, "ibv_query_gid", v->query_gid, true, &missing);
  bind(handle, "ibv_query_pkey", v->query_pkey, true, &missing);
  bind(handle, "_ibv_query_gid_ex", v->query_gid_ex, false, &missing);
  bind(handle, "ibv_alloc_pd", v->alloc_pd, true, &missing);
  bind(handle, "ibv_dealloc_pd", v->dealloc_pd, true, &missing);
  bind(handle, "ibv_reg_mr_iova2", v->reg_mr_iova2, true, &missing);
  bind(handle, "ibv_reg_dmabuf_mr", v->reg_dmabuf_mr, false, &missing);
  bind(handle, "ibv_dereg_mr", v->dereg_mr, true, &missing);
  bind(handle, "ibv_create_cq", v->create_cq, true, &missing);
  bind(handle, "ibv_destroy_cq", v->destroy_cq, true, &missing);
  bind(handle, "ibv_create_qp", v->create_qp, true, &missing);
  bind(handle, "ibv_modify_qp", v->modify_qp, true, &missing);
  bind(handle, "ibv_destroy_qp", v->destroy_qp, true, &missing);
  bind(handle, "ibv_wc_status_str", v->wc_status_str, true, &missing);
  bind(handle, "ibv_get_async_event", v->get_async_event, true, &missing);
  bind(handle, "ibv_ack_async_event", v->ack_async_event, true, &missing);
  bind(handle, "ibv_event_type_str", v->event_type_str, true, &missing);
  bind(handle, "ibv_fork_init", v->fork_init, true, &missing);

  Dl_info info{};
  if (v->get_device_list && dladdr(reinterpret_cast<void*>(v->get_device_list), &info) && info.dli_fname)
    v->path = info.dli_fname;
  else v->path = kLibrary;
  if (!missing.empty())
    return error(Code::kSystemError, v->path + " lacks " + missing + " (rdma-core older than 29?); verbs unavailable");
  // Before any buffer is registered, as NCCL's IB transport does: on kernels that do not keep
  // registered pages across fork() themselves (before 5.13), a child forked while buffers are
  // registered (a PyTorch DataLoader worker) would leave the parent's RDMA writing into pages the
  // child now owns. Where the kernel handles it, this is a no-op.
  if (const int rc = v->fork_init())
    SIEVE_WARN(
        "ibv_fork_init failed (%s): a process that forks while verbs buffers are registered may corrupt "
        "them; start the job with RDMAV_FORK_SAFE=1, or keep workers from forking after NCCL starts",
        std::strerror(rc > 0 ? rc : errno));
  return ok_status();
}

}  // namespace

int VerbsLibrary::port_attributes(ibv_context* context, uint8_t port, ibv_port_attr* attr) const {
  if (verbs_context* extended = verbs_get_ctx_op(context, query_port))
    return extended->query_port(context, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return query_port(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

Status load_verbs(const VerbsLibrary** out) {
  // Process-wide on purpose: the library is loaded once and never unloaded.
  static VerbsLibrary library{};
  static Status result;
  static std::once_flag once;
  std::call_once(once, [] { result = load_once(&library); });
  *out = result.ok() ? &library : nullptr;
  return result;
}

Status DeviceList::get(const VerbsLibrary& verbs, std::unique_ptr<DeviceList>* out) {
  int count = 0;
  errno = 0;
  ibv_device** list = verbs.get_device_list(&count);
  if (!list && errno == ENOSYS)
    return error(Code::kSystemError,
                 "the kernel offers no RDMA devices (no InfiniBand/RoCE driver loaded: "
                 "ibv_get_device_list says \"Function not implemented\")");
  if (!list)
    return error(Code::kSystemError,
                 std::string("ibv_get_device_list failed: ") + std::strerror(errno ? errno : ENODEV));
  out->reset(new DeviceList(verbs, list, count));
  return ok_status();
}

DeviceList::~DeviceList() { verbs_.free_device_list(list_); }

ibv_device* DeviceList::find(const std::string& name) const {
  for (int i = 0; i < count_; ++i)
    if (name == verbs_.get_device_name(list_[i])) return list_[i];
  return nullptr;
}

}  // namespace sieve::net::ib
