// SPDX-License-Identifier: Apache-2.0
// Drives ncclNet_v8..v12 through one facade. The per-version differences are few (init/listen/connect
// signatures, int vs size_t sizes, profiler handles), so each call is one switch on the version.
#include "tools/nccl_emulator/plugin_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "plugin/config.h"
#include "plugin/net/abi/net_v10.h"
#include "plugin/net/abi/net_v11.h"
#include "plugin/net/abi/net_v12.h"
#include "plugin/net/abi/net_v8.h"
#include "plugin/net/abi/net_v9.h"

namespace sieve::tools {
namespace {

namespace abi = sieve::abi;

// NCCL's logger has no user pointer, so its state is process-wide.
std::atomic<int> g_log_level{abi::NCCL_LOG_WARN};
std::atomic<uint64_t> g_warnings{0};
std::mutex g_last_warning_mutex;
std::string g_last_warning;

void plugin_logger(abi::ncclDebugLogLevel level, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
                   const char* fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  if (level == abi::NCCL_LOG_WARN) {
    g_warnings.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(g_last_warning_mutex);
    g_last_warning = message;
  }
  const int threshold = g_log_level.load(std::memory_order_relaxed);
  if (level == abi::NCCL_LOG_NONE || level > threshold) return;
  // Outside NCCL, one format for every Sieve line on stderr, the plugin's own fallback's
  // (net/log.cc): "LEVEL NET/Sieve message". NCCL's decorations and source paths belong in NCCL's log.
  const char* tag = level == abi::NCCL_LOG_WARN ? "WARN" : level == abi::NCCL_LOG_INFO ? "INFO" : "TRACE";
  fprintf(stderr, "%s %s\n", tag, message);
}

// NCCL always hands the plugin a profiler callback; this one records nothing.
abi::ncclResult_t plugin_profiler(void** event_handle, int, void*, int64_t, void*) {
  if (event_handle) *event_handle = nullptr;
  return abi::ncclSuccess;
}

const char* symbol_for(int version) {
  switch (version) {
    case 8: return "ncclNetPlugin_v8";
    case 9: return "ncclNetPlugin_v9";
    case 10: return "ncclNetPlugin_v10";
    case 11: return "ncclNetPlugin_v11";
    case 12: return "ncclNetPlugin_v12";
    default: return nullptr;
  }
}

template <typename Table> const Table* as(const void* table) { return static_cast<const Table*>(table); }

// Expands to the same call on whichever table this plugin holds. Only for calls whose signature is
// identical across v8..v12.
#define SIEVE_SAME_CALL(fn, ...)                                       \
  do {                                                                 \
    switch (version_) {                                                \
      case 8: return as<abi::ncclNet_v8_t>(table_)->fn(__VA_ARGS__);   \
      case 9: return as<abi::ncclNet_v9_t>(table_)->fn(__VA_ARGS__);   \
      case 10: return as<abi::ncclNet_v10_t>(table_)->fn(__VA_ARGS__); \
      case 11: return as<abi::ncclNet_v11_t>(table_)->fn(__VA_ARGS__); \
      case 12: return as<abi::ncclNet_v12_t>(table_)->fn(__VA_ARGS__); \
    }                                                                  \
    return kNetInternalError;                                          \
  } while (0)

template <typename Props> void copy_common(const Props& p, NetDeviceInfo* info) {
  info->name = p.name ? p.name : "";
  info->pci_path = p.pciPath ? p.pciPath : "";
  info->guid = p.guid;
  info->ptr_support = p.ptrSupport;
  info->reg_is_global = p.regIsGlobal;
  info->speed_mbps = p.speed;
  info->port = p.port;
  info->latency_us = p.latency;
  info->max_comms = p.maxComms;
  info->max_recvs = p.maxRecvs;
}

template <typename Props> void copy_v9(const Props& p, NetDeviceInfo* info) {
  copy_common(p, info);
  info->force_flush = p.forceFlush;
  info->max_p2p_bytes = p.maxP2pBytes;
  info->max_coll_bytes = p.maxCollBytes;
}

constexpr int kMaxMultiRecv = 8;

}  // namespace

// The NCCL log level (0 none, 2 warn, 3 info, 5 trace) of a SIEVE_LOG_LEVEL value.
static int nccl_log_level(config::LogLevel sieve_log_level) {
  switch (sieve_log_level) {
    case config::LogLevel::kNone: return kLogNone;
    case config::LogLevel::kWarn: return kLogWarn;
    case config::LogLevel::kInfo: return kLogInfo;
    case config::LogLevel::kTrace: return kLogTrace;
  }
  return kLogWarn;
}

int environment_log_level() {
  // Read as the plugin reads it (a refused value leaves the default, and the plugin warns).
  return nccl_log_level(config::Registry(config::environment_snapshot()).settings().log_level);
}

const char* result_name(int result) {
  switch (result) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError";
    case 2: return "ncclSystemError";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage";
    case 6: return "ncclRemoteError";
    case kTimedOut: return "timed out";
    default: return "unknown ncclResult_t";
  }
}

std::string NetHandle::to_hex() const {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * kHandleBytes);
  for (unsigned char byte : bytes) {
    hex.push_back(digits[byte >> 4]);
    hex.push_back(digits[byte & 15]);
  }
  return hex;
}

bool NetHandle::from_hex(const std::string& hex, NetHandle* out) {
  if (hex.size() != 2 * kHandleBytes) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (int i = 0; i < kHandleBytes; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

std::string plugin_library_name(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos) return name_or_path;
  const bool is_file_name = name_or_path.rfind("lib", 0) == 0 && name_or_path.size() >= 3 &&
                            name_or_path.compare(name_or_path.size() - 3, 3, ".so") == 0;
  if (is_file_name) return name_or_path;
  return "libnccl-net-" + name_or_path + ".so";
}

std::vector<int> exported_versions(const std::string& name_or_path, std::string* error) {
  std::vector<int> versions;
  const std::string library = plugin_library_name(name_or_path);
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    if (error) *error = "cannot load " + library + ": " + dlerror();
    return versions;
  }
  for (int v = kNewestVersion; v >= kOldestVersion; --v) {
    if (dlsym(handle, symbol_for(v))) versions.push_back(v);
  }
  // The library stays loaded: a plugin may have started threads in constructors (none should).
  return versions;
}

std::unique_ptr<NetPlugin> NetPlugin::open(const std::string& name_or_path, const LoaderOptions& options,
                                           std::string* error) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<NetPlugin> {
    if (error) *error = why;
    return nullptr;
  };
  if (options.version != 0 && !symbol_for(options.version)) {
    return fail("unsupported net ABI version " + std::to_string(options.version) + " (8..12)");
  }
  const std::string library = plugin_library_name(name_or_path);
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return fail("cannot load " + library + ": " + dlerror());

  std::unique_ptr<NetPlugin> plugin(new NetPlugin());
  plugin->library_handle_ = handle;
  plugin->library_ = library;
  plugin->options_ = options;
  for (int v = kNewestVersion; v >= kOldestVersion; --v) {
    if (options.version != 0 && v != options.version) continue;
    if (const void* table = dlsym(handle, symbol_for(v))) {
      plugin->table_ = table;
      plugin->version_ = v;
      break;
    }
  }
  if (!plugin->table_) {
    return fail(library + " exports no " +
                (options.version ? std::string(symbol_for(options.version)) : std::string("ncclNetPlugin_v8..v12")));
  }
  g_log_level.store(options.log_level == kLogLevelFromEnvironment ? environment_log_level() : options.log_level,
                    std::memory_order_relaxed);
  return plugin;
}

NetPlugin::~NetPlugin() {
  finalize();
  // Never dlclose: NCCL does not either while the process lives, and a plugin's helper threads
  // could still be unwinding inside the library's code.
}

std::string NetPlugin::library_file() const {
  link_map* map = nullptr;
  if (dlinfo(library_handle_, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name || !*map->l_name) return library_;
  return map->l_name;
}

const char* NetPlugin::name() const {
  switch (version_) {
    case 8: return as<abi::ncclNet_v8_t>(table_)->name;
    case 9: return as<abi::ncclNet_v9_t>(table_)->name;
    case 10: return as<abi::ncclNet_v10_t>(table_)->name;
    case 11: return as<abi::ncclNet_v11_t>(table_)->name;
    case 12: return as<abi::ncclNet_v12_t>(table_)->name;
  }
  return "";
}

int NetPlugin::init() {
  if (initialized_) return kNetSuccess;
  int result = kNetInternalError;
  switch (version_) {
    case 8: result = as<abi::ncclNet_v8_t>(table_)->init(plugin_logger); break;
    case 9: result = as<abi::ncclNet_v9_t>(table_)->init(plugin_logger); break;
    case 10: result = as<abi::ncclNet_v10_t>(table_)->init(plugin_logger, plugin_profiler); break;
    case 11: {
      abi::ncclNetCommConfig_v11_t config{options_.traffic_class};
      result =
          as<abi::ncclNet_v11_t>(table_)->init(&context_, options_.comm_id, &config, plugin_logger, plugin_profiler);
      break;
    }
    case 12: {
      abi::ncclNetCommConfig_v12_t config{options_.traffic_class};
      result =
          as<abi::ncclNet_v12_t>(table_)->init(&context_, options_.comm_id, &config, plugin_logger, plugin_profiler);
      break;
    }
  }
  initialized_ = result == kNetSuccess;
  return result;
}

int NetPlugin::finalize() {
  if (!initialized_) return kNetSuccess;
  initialized_ = false;
  if (version_ < 11) return kNetSuccess;
  const int result = version_ == 11 ? as<abi::ncclNet_v11_t>(table_)->finalize(context_)
                                    : as<abi::ncclNet_v12_t>(table_)->finalize(context_);
  context_ = nullptr;
  return result;
}

int NetPlugin::devices(int* ndev) { SIEVE_SAME_CALL(devices, ndev); }

int NetPlugin::properties(int dev, NetDeviceInfo* info) {
  int result = kNetInternalError;
  switch (version_) {
    case 8: {
      abi::ncclNetProperties_v8_t p{};
      result = as<abi::ncclNet_v8_t>(table_)->getProperties(dev, &p);
      if (result == kNetSuccess) copy_common(p, info);
      break;
    }
    case 9: {
      abi::ncclNetProperties_v9_t p{};
      result = as<abi::ncclNet_v9_t>(table_)->getProperties(dev, &p);
      if (result == kNetSuccess) copy_v9(p, info);
      break;
    }
    case 10: {
      abi::ncclNetProperties_v10_t p{};
      result = as<abi::ncclNet_v10_t>(table_)->getProperties(dev, &p);
      if (result == kNetSuccess) copy_v9(p, info);
      break;
    }
    case 11: {
      abi::ncclNetProperties_v11_t p{};
      result = as<abi::ncclNet_v11_t>(table_)->getProperties(dev, &p);
      if (result == kNetSuccess) {
        copy_v9(p, info);
        info->max_multi_request_size = p.maxMultiRequestSize;
      }
      break;
    }
    case 12: {
      abi::ncclNetProperties_v12_t p{};
      result = as<abi::ncclNet_v12_t>(table_)->getProperties(dev, &p);
      if (result == kNetSuccess) {
        copy_v9(p, info);
        info->max_multi_request_size = p.maxMultiRequestSize;
        info->rail_id = p.railId;
        info->plane_id = p.planeId;
      }
      break;
    }
  }
  return result;
}

int NetPlugin::listen(int dev, NetHandle* handle, void** listen_comm) {
  switch (version_) {
    case 8: return as<abi::ncclNet_v8_t>(table_)->listen(dev, handle->bytes, listen_comm);
    case 9: return as<abi::ncclNet_v9_t>(table_)->listen(dev, handle->bytes, listen_comm);
    case 10: return as<abi::ncclNet_v10_t>(table_)->listen(dev, handle->bytes, listen_comm);
    case 11: return as<abi::ncclNet_v11_t>(table_)->listen(context_, dev, handle->bytes, listen_comm);
    case 12: return as<abi::ncclNet_v12_t>(table_)->listen(context_, dev, handle->bytes, listen_comm);
  }
  return kNetInternalError;
}

int NetPlugin::connect(int dev, NetHandle* handle, void** send_comm) {
  abi::ncclNetDeviceHandle_v7_t* device_handle = nullptr;
  switch (version_) {
    case 8: return as<abi::ncclNet_v8_t>(table_)->connect(dev, handle->bytes, send_comm, &device_handle);
    case 9: return as<abi::ncclNet_v9_t>(table_)->connect(dev, handle->bytes, send_comm, &device_handle);
    case 10: {
      abi::ncclNetCommConfig_v10_t config{options_.traffic_class};
      return as<abi::ncclNet_v10_t>(table_)->connect(dev, &config, handle->bytes, send_comm, &device_handle);
    }
    case 11: return as<abi::ncclNet_v11_t>(table_)->connect(context_, dev, handle->bytes, send_comm, &device_handle);
    case 12: return as<abi::ncclNet_v12_t>(table_)->connect(context_, dev, handle->bytes, send_comm, &device_handle);
  }
  return kNetInternalError;
}

int NetPlugin::accept(void* listen_comm, void** recv_comm) {
  abi::ncclNetDeviceHandle_v7_t* device_handle = nullptr;
  SIEVE_SAME_CALL(accept, listen_comm, recv_comm, &device_handle);
}

int NetPlugin::reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  SIEVE_SAME_CALL(regMr, comm, data, size, type, mhandle);
}

int NetPlugin::dereg_mr(void* comm, void* mhandle) { SIEVE_SAME_CALL(deregMr, comm, mhandle); }

int NetPlugin::reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  SIEVE_SAME_CALL(regMrDmaBuf, comm, data, size, type, offset, fd, mhandle);
}

int NetPlugin::iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  SIEVE_SAME_CALL(iflush, recv_comm, n, data, sizes, mhandles, request);
}

int NetPlugin::isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  switch (version_) {
    case 8:
      if (size > static_cast<size_t>(INT_MAX)) return kNetInvalidArgument;
      return as<abi::ncclNet_v8_t>(table_)->isend(send_comm, data, static_cast<int>(size), tag, mhandle, request);
    case 9: return as<abi::ncclNet_v9_t>(table_)->isend(send_comm, data, size, tag, mhandle, request);
    case 10: return as<abi::ncclNet_v10_t>(table_)->isend(send_comm, data, size, tag, mhandle, nullptr, request);
    case 11: return as<abi::ncclNet_v11_t>(table_)->isend(send_comm, data, size, tag, mhandle, nullptr, request);
    case 12: return as<abi::ncclNet_v12_t>(table_)->isend(send_comm, data, size, tag, mhandle, nullptr, request);
  }
  return kNetInternalError;
}

int NetPlugin::irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                     void** request) {
  if (n < 1 || n > kMaxMultiRecv) return kNetInvalidArgument;
  int tag_copy[kMaxMultiRecv];
  size_t size_copy[kMaxMultiRecv];
  int int_sizes[kMaxMultiRecv];
  void* phandles[kMaxMultiRecv] = {};
  for (int i = 0; i < n; ++i) {
    tag_copy[i] = tags[i];
    size_copy[i] = sizes[i];
    if (version_ == 8 && sizes[i] > static_cast<size_t>(INT_MAX)) return kNetInvalidArgument;
    int_sizes[i] = static_cast<int>(sizes[i]);
  }
  switch (version_) {
    case 8: return as<abi::ncclNet_v8_t>(table_)->irecv(recv_comm, n, data, int_sizes, tag_copy, mhandles, request);
    case 9: return as<abi::ncclNet_v9_t>(table_)->irecv(recv_comm, n, data, size_copy, tag_copy, mhandles, request);
    case 10:
      return as<abi::ncclNet_v10_t>(table_)->irecv(recv_comm, n, data, size_copy, tag_copy, mhandles, phandles,
                                                   request);
    case 11:
      return as<abi::ncclNet_v11_t>(table_)->irecv(recv_comm, n, data, size_copy, tag_copy, mhandles, phandles,
                                                   request);
    case 12:
      return as<abi::ncclNet_v12_t>(table_)->irecv(recv_comm, n, data, size_copy, tag_copy, mhandles, phandles,
                                                   request);
  }
  return kNetInternalError;
}

int NetPlugin::test(void* request, int* done, int* sizes) { SIEVE_SAME_CALL(test, request, done, sizes); }
int NetPlugin::close_send(void* send_comm) { SIEVE_SAME_CALL(closeSend, send_comm); }
int NetPlugin::close_recv(void* recv_comm) { SIEVE_SAME_CALL(closeRecv, recv_comm); }
int NetPlugin::close_listen(void* listen_comm) { SIEVE_SAME_CALL(closeListen, listen_comm); }

#undef SIEVE_SAME_CALL

namespace {
// NCCL's proxy spins on these calls; a short sleep keeps two test processes from starving each
// other on a 2-core machine without changing what the plugin sees. Connection set-up is not on the
// data path, so it polls less often.
void pause_briefly() {
  timespec pause{0, 20 * 1000};
  nanosleep(&pause, nullptr);
}
void pause_setup() {
  timespec pause{0, 1000 * 1000};
  nanosleep(&pause, nullptr);
}
}  // namespace

int connect_until(NetPlugin& net, int dev, NetHandle* handle, void** send_comm, int timeout_ms) {
  *send_comm = nullptr;
  const int64_t deadline = monotonic_ms() + timeout_ms;
  while (true) {
    const int result = net.connect(dev, handle, send_comm);
    if (result != kNetSuccess || *send_comm) return result;
    if (monotonic_ms() > deadline) return kTimedOut;
    pause_setup();
  }
}

int accept_until(NetPlugin& net, void* listen_comm, void** recv_comm, int timeout_ms) {
  *recv_comm = nullptr;
  const int64_t deadline = monotonic_ms() + timeout_ms;
  while (true) {
    const int result = net.accept(listen_comm, recv_comm);
    if (result != kNetSuccess || *recv_comm) return result;
    if (monotonic_ms() > deadline) return kTimedOut;
    pause_setup();
  }
}

int connect_accept_until(NetPlugin& net, int dev, NetHandle* handle, void* listen_comm, void** send_comm,
                         void** recv_comm, int timeout_ms) {
  *send_comm = nullptr;
  *recv_comm = nullptr;
  const int64_t deadline = monotonic_ms() + timeout_ms;
  while (!*send_comm || !*recv_comm) {
    if (!*send_comm) {
      const int result = net.connect(dev, handle, send_comm);
      if (result != kNetSuccess) return result;
    }
    if (!*recv_comm) {
      const int result = net.accept(listen_comm, recv_comm);
      if (result != kNetSuccess) return result;
    }
    if (monotonic_ms() > deadline) return kTimedOut;
    if (!*send_comm || !*recv_comm) pause_setup();
  }
  return kNetSuccess;
}

int isend_until(NetPlugin& net, void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request,
                int timeout_ms) {
  *request = nullptr;
  const int64_t deadline = monotonic_ms() + timeout_ms;
  while (true) {
    const int result = net.isend(send_comm, data, size, tag, mhandle, request);
    if (result != kNetSuccess || *request) return result;
    if (monotonic_ms() > deadline) return kTimedOut;
    pause_briefly();
  }
}

int irecv_until(NetPlugin& net, void* recv_comm, void* data, size_t size, int tag, void* mhandle, void** request,
                int timeout_ms) {
  *request = nullptr;
  const int64_t deadline = monotonic_ms() + timeout_ms;
  while (true) {
    const int result = net.irecv(recv_comm, 1, &data, &size, &tag, &mhandle, request);
    if (result != kNetSuccess || *request) return result;
    if (monotonic_ms() > deadline) return kTimedOut;
    pause_briefly();
  }
}

int wait_until(NetPlugin& net, void* request, int* size, int timeout_ms) {
  const int64_t deadline = monotonic_ms() + timeout_ms;
  int reported = 0;
  while (true) {
    int done = 0;
    const int result = net.test(request, &done, &reported);
    if (result != kNetSuccess) return result;
    if (done) {
      if (size) *size = reported;
      return kNetSuccess;
    }
    if (monotonic_ms() > deadline) return kTimedOut;
    pause_briefly();
  }
}

uint64_t plugin_warning_count() { return g_warnings.load(std::memory_order_relaxed); }

std::string last_plugin_warning() {
  std::lock_guard<std::mutex> lock(g_last_warning_mutex);
  return g_last_warning;
}

}  // namespace sieve::tools
