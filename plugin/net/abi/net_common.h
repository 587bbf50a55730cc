// SPDX-License-Identifier: Apache-2.0
// Types shared by every version of NCCL's net plugin ABI, declared here from NCCL's documented
// ext-net interface (tag v2.28.9-1). Kept in namespace sieve::abi so that translation units which
// also include NCCL's own nccl.h (the collective proxy) see no clash. Only plugin/ includes this.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::abi {

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
};

enum ncclDebugLogLevel : int {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
};

// Subsystem flags passed to the logger (NCCL's ncclDebugLogSubSys; NCCL_DEBUG_SUBSYS names them).
constexpr unsigned long NCCL_INIT = 1;
constexpr unsigned long NCCL_COLL = 2;
constexpr unsigned long NCCL_P2P = 4;
constexpr unsigned long NCCL_SHM = 8;
constexpr unsigned long NCCL_NET = 16;
constexpr unsigned long NCCL_GRAPH = 32;
constexpr unsigned long NCCL_TUNING = 64;
constexpr unsigned long NCCL_ENV = 128;
constexpr unsigned long NCCL_ALLOC = 256;
constexpr unsigned long NCCL_CALL = 512;
constexpr unsigned long NCCL_PROXY = 1024;
constexpr unsigned long NCCL_NVLS = 2048;
constexpr unsigned long NCCL_BOOTSTRAP = 4096;
constexpr unsigned long NCCL_REG = 8192;
constexpr unsigned long NCCL_ALL = ~0ul;

using ncclDebugLogger_t = void (*)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                   const char* fmt, ...);
using ncclProfilerCallback_t = ncclResult_t (*)(void** eHandle, int type, void* phandle, int64_t pluginId,
                                                void* extData);

constexpr int NCCL_NET_HANDLE_MAXSIZE = 128;
constexpr int NCCL_PTR_HOST = 0x1;
constexpr int NCCL_PTR_CUDA = 0x2;
constexpr int NCCL_PTR_DMABUF = 0x4;
constexpr int NCCL_NET_MAX_REQUESTS = 32;
constexpr int NCCL_NET_MAX_DEVS_PER_NIC = 4;
constexpr int NCCL_NET_TRAFFIC_CLASS_UNDEF = -1;

enum ncclNetDeviceType : int { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 };

// Device offload handle (unchanged from v7 through v12). Sieve never offloads: it leaves it unset.
struct ncclNetDeviceHandle_v7_t {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};
static_assert(sizeof(ncclNetDeviceHandle_v7_t) == 32, "device handle layout");

}  // namespace sieve::abi
