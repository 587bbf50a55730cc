// SPDX-License-Identifier: Apache-2.0
// The v11 entry points whose signatures v12 kept (v12 changed only the properties and the virtual
// NIC structs), so the v12 table reuses them instead of a copy.
#pragma once

#include "plugin/net/abi/net_v11.h"
#include "plugin/net/net_plugin.h"

namespace sieve::plugin::v11 {

ncclResult_t init(void** ctx, uint64_t comm_id, abi::ncclNetCommConfig_v11_t* config, abi::ncclDebugLogger_t logger,
                  abi::ncclProfilerCallback_t profiler);
ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, abi::ncclNetDeviceHandle_v7_t** dev_comm);
ncclResult_t accept(void* listen_comm, void** recv_comm, abi::ncclNetDeviceHandle_v7_t** dev_comm);
ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                   void** request);
ncclResult_t set_net_attr(void* ctx, abi::ncclNetAttr_v11_t* attr);

}  // namespace sieve::plugin::v11
