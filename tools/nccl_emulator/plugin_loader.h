// SPDX-License-Identifier: Apache-2.0
// A small loader for NCCL net plugins: dlopen a library by path or by NCCL's plugin name, resolve
// ncclNetPlugin_vN, and drive whichever version was chosen through ONE version-independent facade.
// Conformance tests, sieve-perf and sieve-bench use it so that every exported ABI version is exercised
// by the same code, the way NCCL 2.28's proxy calls it (init per communicator, non-blocking
// connect/accept, NULL requests retried, test polled).
//
// Results are NCCL's ncclResult_t values as plain ints (0 = success) plus kTimedOut for the bounded
// helpers; nothing here throws across the plugin boundary.
#pragma once

#include <cstddef>
#include <cstdint>

#include <memory>
#include <string>
#include <vector>
#include "tools/common/subprocess.h"

namespace sieve::tools {

constexpr int kNetSuccess = 0;
constexpr int kNetInternalError = 3;
constexpr int kNetInvalidArgument = 4;
// Returned by the *_until helpers when the deadline passed first (not an NCCL value).
constexpr int kTimedOut = -1;

constexpr int kHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
constexpr int kMaxRequests = 32;   // NCCL_NET_MAX_REQUESTS per comm
constexpr int kPtrHost = 0x1;      // NCCL_PTR_HOST
constexpr int kPtrCuda = 0x2;      // NCCL_PTR_CUDA
constexpr int kPtrDmaBuf = 0x4;    // NCCL_PTR_DMABUF
constexpr int kOldestVersion = 8;
constexpr int kNewestVersion = 12;

// "ncclSuccess", "ncclSystemError", ... or "timed out".
const char* result_name(int result);

struct NetHandle {
  unsigned char bytes[kHandleBytes] = {};
  std::string to_hex() const;
  static bool from_hex(const std::string& hex, NetHandle* out);
};

// Version-independent view of ncclNetProperties_vN.
struct NetDeviceInfo {
  std::string name;
  std::string pci_path;
  uint64_t guid = 0;
  int ptr_support = 0;
  int reg_is_global = 0;
  int force_flush = 0;  // v9+
  int speed_mbps = 0;
  int port = 0;
  float latency_us = 0;
  int max_comms = 0;
  int max_recvs = 0;
  size_t max_p2p_bytes = 0;        // v9+ (0 when the version has no such field)
  size_t max_coll_bytes = 0;       // v9+
  int max_multi_request_size = 0;  // v11
  int rail_id = -1;                // v12 (-1: unknown)
  int plane_id = -1;               // v12
};

// NCCL's log levels, as LoaderOptions::log_level takes them.
constexpr int kLogNone = 0;
constexpr int kLogWarn = 2;
constexpr int kLogInfo = 3;
constexpr int kLogTrace = 5;
// LoaderOptions::log_level's default: the level SIEVE_LOG_LEVEL names (none, warn, info, trace), read
// when the plugin is opened, so a tool's user sets Sieve's log outside NCCL as the README says.
constexpr int kLogLevelFromEnvironment = -1;
// The NCCL log level SIEVE_LOG_LEVEL in this process's environment asks for (warn when unset or bad).
int environment_log_level();

struct LoaderOptions {
  int version = 0;                           // 8..12, or 0 for the newest the library exports
  int log_level = kLogLevelFromEnvironment;  // NCCL level printed to stderr: 0 none, 2 warn, 3 info, 5 trace
  uint64_t comm_id = 0x5157e;                // v11 init's commId
  int traffic_class = -1;                    // v10 connect / v11 init config
};

// Where NCCL would look for a plugin called `name_or_path`: a path (contains '/') or a library file
// name (lib*.so) is used as is; any other name N becomes libnccl-net-N.so (NCCL's naming rule).
std::string plugin_library_name(const std::string& name_or_path);

// Versions (8..12) whose ncclNetPlugin_vN symbol the library exports, newest first.
std::vector<int> exported_versions(const std::string& name_or_path, std::string* error);

class NetPlugin {
 public:
  // nullptr (and *error set) when the library or the requested symbol cannot be found.
  static std::unique_ptr<NetPlugin> open(const std::string& name_or_path, const LoaderOptions& options,
                                         std::string* error);
  ~NetPlugin();
  NetPlugin(const NetPlugin&) = delete;
  NetPlugin& operator=(const NetPlugin&) = delete;

  int version() const { return version_; }
  const char* name() const;  // the table's name field ("Sieve")
  const std::string& library() const { return library_; }
  // The file the dynamic loader mapped for library() (a name such as libnccl-net-sieve.so resolved
  // through the loader's search, as NCCL's dlopen resolves it); library() when it cannot say.
  std::string library_file() const;

  // v8-v10: init(logger[, profiler]); v11, v12: init(&ctx, commId, &config, logger, profiler).
  int init();
  // v11, v12: finalize(ctx); earlier versions have no finalize (no-op). Called by the destructor if needed.
  int finalize();
  int devices(int* ndev);
  int properties(int dev, NetDeviceInfo* info);
  int listen(int dev, NetHandle* handle, void** listen_comm);
  // One non-blocking attempt each, exactly as NCCL calls them; *comm stays NULL until ready.
  int connect(int dev, NetHandle* handle, void** send_comm);
  int accept(void* listen_comm, void** recv_comm);
  int reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
  int dereg_mr(void* comm, void* mhandle);
  // Device memory exported as a dma-buf (NCCL calls it with type NCCL_PTR_CUDA and the buffer's fd).
  int reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  // *request is NULL when there is nothing to flush (host memory).
  int iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  // *request may come back NULL: the plugin cannot take it now, call again later.
  // v8's int sizes: a size above INT_MAX is refused here with kNetInvalidArgument.
  int isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
  int irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles, void** request);
  int test(void* request, int* done, int* sizes);
  int close_send(void* send_comm);
  int close_recv(void* recv_comm);
  int close_listen(void* listen_comm);

 private:
  NetPlugin() = default;
  void* library_handle_ = nullptr;
  std::string library_;
  int version_ = 0;
  const void* table_ = nullptr;  // ncclNet_vN_t*
  void* context_ = nullptr;      // v11+ per-communicator context
  bool initialized_ = false;
  LoaderOptions options_;
};

// ---- Bounded helpers: poll the non-blocking calls until done, an error, or the deadline. ----

// Calls connect until a send comm appears.
int connect_until(NetPlugin& net, int dev, NetHandle* handle, void** send_comm, int timeout_ms);
// Calls accept until a recv comm appears.
int accept_until(NetPlugin& net, void* listen_comm, void** recv_comm, int timeout_ms);
// Both ends in one process (NCCL's loopback case): alternates connect and accept.
int connect_accept_until(NetPlugin& net, int dev, NetHandle* handle, void* listen_comm, void** send_comm,
                         void** recv_comm, int timeout_ms);
// Retries isend / irecv while the plugin answers with a NULL request.
int isend_until(NetPlugin& net, void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request,
                int timeout_ms);
int irecv_until(NetPlugin& net, void* recv_comm, void* data, size_t size, int tag, void* mhandle, void** request,
                int timeout_ms);
// Polls test until done; *size gets the reported size (may be NULL).
int wait_until(NetPlugin& net, void* request, int* size, int timeout_ms);

// ---- NCCL's logger, as the plugin sees it. Process-wide because NCCL's logger is a bare function. ----
// Number of WARN lines the plugin logged since the process started, and the last one.
uint64_t plugin_warning_count();
std::string last_plugin_warning();

}  // namespace sieve::tools
