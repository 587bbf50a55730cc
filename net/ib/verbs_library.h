// SPDX-License-Identifier: Apache-2.0
// libibverbs, loaded at run time. Sieve never links against it: the same library runs TCP on a
// machine without rdma-core, and a test selects a stand-in (tests/net/ib/fake_verbs) by putting it
// first in LD_LIBRARY_PATH. Every verbs call the transport makes goes through this one table.
//
// The data path (ibv_post_send, ibv_post_recv, ibv_poll_cq) is not here: those are inline functions
// of <infiniband/verbs.h> that call through the provider's ops in the context, so they work on any
// context this table opened.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "net/status.h"

namespace sieve::net::ib {

struct VerbsLibrary {
  ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  __be64 (*get_device_guid)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);
  // The exported symbol behind the ibv_query_port macro; ibv_port_attr starts with its fields.
  int (*query_port)(ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr);
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  int (*query_pkey)(ibv_context* context, uint8_t port, int index, __be16* pkey);
  // Behind the inline ibv_query_gid_ex (rdma-core >= 32): GID type and paired netdev. Optional:
  // null on older libraries, where sysfs answers instead.
  int (*query_gid_ex)(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr_iova2)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access);
  // Optional (rdma-core >= 34): GPU memory exported as a dma-buf. Null: host memory only.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(ibv_qp* qp);
  const char* (*wc_status_str)(ibv_wc_status status);
  int (*get_async_event)(ibv_context* context, ibv_async_event* event);
  void (*ack_async_event)(ibv_async_event* event);
  const char* (*event_type_str)(ibv_event_type type);
  int (*fork_init)();

  std::string path;  // where the loaded library lives (dladdr), for sieve-info and log lines

  // What the ibv_query_port macro does: the provider's extended query (full attributes, speeds
  // beyond NDR) when the context has one, else the compat symbol above.
  int port_attributes(ibv_context* context, uint8_t port, ibv_port_attr* attr) const;
};

// Loads libibverbs.so.1 once per process (later calls return the same table or the same error;
// the library stays loaded until exit, as providers keep threads and state in it) and makes
// registered memory fork-safe (ibv_fork_init; a warning where that fails). Error: the
// library is missing ("install rdma-core / libibverbs1"), or a required symbol is missing (named).
Status load_verbs(const VerbsLibrary** out);

// The devices libibverbs lists (ibv_get_device_list), freed with the object.
class DeviceList {
 public:
  // Error: the kernel offers no RDMA devices (no driver loaded), or the listing failed, said so.
  static Status get(const VerbsLibrary& verbs, std::unique_ptr<DeviceList>* out);
  ~DeviceList();
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  int size() const { return count_; }
  ibv_device* operator[](int i) const { return list_[i]; }
  ibv_device* find(const std::string& name) const;  // null when not listed

 private:
  DeviceList(const VerbsLibrary& verbs, ibv_device** list, int count) : verbs_(verbs), list_(list), count_(count) {}
  const VerbsLibrary& verbs_;
  ibv_device** const list_;
  const int count_;
};

}  // namespace sieve::net::ib
