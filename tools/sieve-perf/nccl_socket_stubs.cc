// SPDX-License-Identifier: Apache-2.0
// The rest of NCCL that its socket transport (src/transport/net_socket.cc) reaches for, reduced to
// what a GPU-less benchmark host needs, so that build-nccl-socket-plugin.sh can build NCCL's own
// transport from a caller's NCCL tree into an ext-net plugin for `sieve-perf --compare`.
// Compiled against that tree's headers (nothing of NCCL lives in this repository); the plugin's
// only export is ncclNetPlugin_v11 (NCCL 2.28's ncclNet_t is the v11 table).
//
// Why stubs rather than more of NCCL: the installed libnccl's accept() asks the CUDA runtime for
// the current device and fails without a driver; here cudaGetDevice answers device 0, and debug
// logging, the environment plugin and thread naming are the few lines the transport actually uses.
#include <pthread.h>

#include <strings.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_runtime.h>

#include "debug.h"
#include "env.h"
#include "net.h"

// --- CUDA runtime: net_socket.cc records the current device; misc/utils.cc (linked for its
// interface-list parsing) also names the bus-id and capability queries, which this host lacks.
extern "C" {
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int) { return cudaErrorNoDevice; }
cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return cudaErrorNoDevice; }
const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "no CUDA device (nccl_socket_stubs.cc)";
}
}

// --- Debug logging: NCCL_DEBUG=VERSION|WARN|INFO|TRACE as in NCCL, to stderr; NCCL_DEBUG_SUBSYS
// is not parsed (every subsystem is shown), which only matters at INFO and above.
namespace {
int debug_level_from_env() {
  const char* v = std::getenv("NCCL_DEBUG");
  if (!v) return NCCL_LOG_NONE;
  if (!strcasecmp(v, "VERSION")) return NCCL_LOG_VERSION;
  if (!strcasecmp(v, "WARN")) return NCCL_LOG_WARN;
  if (!strcasecmp(v, "INFO")) return NCCL_LOG_INFO;
  if (!strcasecmp(v, "ABORT")) return NCCL_LOG_ABORT;
  if (!strcasecmp(v, "TRACE")) return NCCL_LOG_TRACE;
  return NCCL_LOG_NONE;
}
}  // namespace

int ncclDebugLevel = debug_level_from_env();
uint64_t ncclDebugMask = ~uint64_t{0};
FILE* ncclDebugFile = stderr;
thread_local int ncclDebugNoWarn = 0;
char ncclLastError[1024] = "";

void ncclDebugLog(ncclDebugLogLevel level, unsigned long /*flags*/, const char* filefunc, int line, const char* fmt,
                  ...) {
  // NOWARN(...) turns the transport's expected failures (a peer still connecting) into INFO.
  if (level == NCCL_LOG_WARN && ncclDebugNoWarn != 0) level = NCCL_LOG_INFO;
  if (level == NCCL_LOG_WARN) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(ncclLastError, sizeof ncclLastError, fmt, ap);
    va_end(ap);
  }
  if (ncclDebugLevel < level) return;
  static const char* const names[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(ncclDebugFile, "NCCL-socket %s %s:%d %s\n", names[level], filefunc, line, msg);
}

void ncclSetThreadName(pthread_t thread, const char* fmt, ...) {
  char name[NCCL_THREAD_NAMELEN];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  pthread_setname_np(thread, name);
}

// --- Environment: NCCL's env plugin, without plugins: the process environment itself.
ncclResult_t ncclInitEnv(void) { return ncclSuccess; }
const char* ncclEnvPluginGetEnv(const char* name) { return std::getenv(name); }

// --- The plugin's table: NCCL's own ncclNetSocket (a v11 table in 2.28), exported unchanged.
extern ncclNet_t ncclNetSocket;
static_assert(std::is_same_v<ncclNet_t, ncclNet_v11_t>,
              "this NCCL's ncclNet_t is not the v11 table (NCCL 2.28 needed)");
extern "C" {
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = ncclNetSocket;
}
