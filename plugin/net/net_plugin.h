// SPDX-License-Identifier: Apache-2.0
// The one internal adapter between NCCL's net ABI and net::Transport. Every versioned shim
// (shim_v8.cc ... shim_v11.cc) is a thin table over these functions: they take the widest types
// (size_t sizes, a context), map net::Status to ncclResult_t, log errors through NCCL's logger and
// never let an exception cross the C boundary.
//
// Process state (the transport, its devices) is shared and reference-counted: v8-v10 take one
// reference at init and keep it; v11 calls init once per communicator and finalize releases.
#pragma once

#include <cstddef>
#include <cstdint>

#include "net/log.h"
#include "plugin/net/abi/net_common.h"

namespace sieve::plugin {

using abi::ncclResult_t;

constexpr const char* kPluginName = "Sieve";

// Fields common to every version of ncclNetProperties; the shims copy them into their struct.
struct DeviceProperties {
  const char* name = nullptr;
  const char* pci_path = nullptr;  // null for a virtual interface
  uint64_t guid = 0;
  int port = 0;
  int ptr_support = abi::NCCL_PTR_HOST;
  int speed_mbps = 0;
  int max_comms = 0;
  int max_recvs = 1;
  int reg_is_global = 0;  // regIsGlobal: the transport's registrations are the device's, not a comm's
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
};
constexpr size_t kMaxNetSizeBytes = size_t(1) << 40;  // NCCL_MAX_NET_SIZE_BYTES

// v8-v10: one process-wide init (repeated calls are harmless).
ncclResult_t net_init(abi::ncclDebugLogger_t logger);
// v11: one context per communicator; each holds a reference on the process state.
ncclResult_t net_init_context(void** ctx, uint64_t comm_id, int traffic_class, abi::ncclDebugLogger_t logger);
ncclResult_t net_finalize(void* ctx);

ncclResult_t net_devices(int* ndev);
ncclResult_t net_properties(int dev, DeviceProperties* props);
ncclResult_t net_listen(void* ctx, int dev, void* handle, void** listen_comm);
// `traffic_class`: the connection's (v10's per-connection config), or NCCL_NET_TRAFFIC_CLASS_UNDEF
// to take the context's (v11 and later: per communicator, from init).
ncclResult_t net_connect(void* ctx, int dev, int traffic_class, void* handle, void** send_comm);
ncclResult_t net_accept(void* listen_comm, void** recv_comm);
ncclResult_t net_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t net_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
ncclResult_t net_dereg_mr(void* comm, void* mhandle);
ncclResult_t net_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t net_irecv(void* recv_comm, int n, void** data, const size_t* sizes, int* tags, void** mhandles,
                       void** request);
ncclResult_t net_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t net_test(void* request, int* done, size_t* size);
ncclResult_t net_close_send(void* send_comm);
ncclResult_t net_close_recv(void* recv_comm);
ncclResult_t net_close_listen(void* listen_comm);
ncclResult_t net_set_attr(void* ctx, const void* attr);

// How many references the process state holds (tests check that finalize releases).
int net_state_references();

// NCCL's logger as the sink of net/log.h (nccl_logger.cc); null restores the stderr fallback.
void install_nccl_logger(abi::ncclDebugLogger_t logger);
// The flags NCCL's logger gets for a line of `subsystem` (plugin/net/nccl_logger.cc).
unsigned long nccl_flags(log::Subsystem subsystem);
// The Sieve subsystems whose lines NCCL prints under NCCL_DEBUG_SUBSYS=`nccl_debug_subsys` (nullptr:
// unset, NCCL's default); every one for a name Sieve does not know.
uint32_t sieve_subsystems(const char* nccl_debug_subsys);
// The highest Sieve level NCCL prints under NCCL_DEBUG=`nccl_debug` (nullptr or unknown: Trace).
log::Level sieve_level(const char* nccl_debug);

}  // namespace sieve::plugin
