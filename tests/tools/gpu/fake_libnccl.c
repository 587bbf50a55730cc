// SPDX-License-Identifier: Apache-2.0
/* A stand-in for NCCL's libnccl.so.2, for testing the GPU kit's NCCL canary and NCCL steps on a
 * machine without a GPU. sieve-allreduce-perf makes its communicator before any CUDA call, so what
 * this library does in ncclCommInitRank is what the canary sees. FAKE_NCCL chooses it:
 *   fail         print an NCCL warning (as NCCL does, on stdout) and return ncclSystemError
 *   hang         never return; on SIGUSR1 write a line (standing in for the proxy's state dump)
 *   sieve-fails  fail as above when NCCL_NET=Sieve, else "ok"
 *   ok           (default) stand for a working NCCL and GPU: print the 1 MiB row a rank of
 *                sieve-allreduce-perf prints, and end the process with status 0 (nothing CUDA can
 *                run here, so the job can go no further) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void* ncclComm_t;

static void info(const char* text) {
  const char* debug = getenv("NCCL_DEBUG");
  if (debug && strcmp(debug, "INFO") == 0)
    printf("fakehost:%d:%d [0] NCCL INFO %s\n", (int)getpid(), (int)getpid(), text);
}

static void dump(int signo) {
  (void)signo;
  static const char line[] = "fake NCCL: state dump on SIGUSR1\n";
  if (write(2, line, sizeof line - 1) < 0) _exit(3);
}

FAKE_EXPORT int ncclGetVersion(int* version) {
  *version = 22899;
  return 0;
}
FAKE_EXPORT const char* ncclGetErrorString(int result) {
  return result == 2 ? "unhandled system error (run with NCCL_DEBUG=INFO for details)" : "fake NCCL error";
}
FAKE_EXPORT int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 7, sizeof *id);
  return 0;
}

FAKE_EXPORT int ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  (void)comm;
  (void)id;
  char text[256];
  const char* subsys = getenv("NCCL_DEBUG_SUBSYS");
  const char* net = getenv("NCCL_NET");
  snprintf(text, sizeof text, "NCCL_DEBUG_SUBSYS set by environment to %s", subsys ? subsys : "(unset)");
  info(text);
  snprintf(text, sizeof text, "NCCL_NET set by environment to %s", net ? net : "(unset)");
  info(text);
  fflush(stdout);
  const char* mode = getenv("FAKE_NCCL");
  if (!mode) mode = "ok";
  if (strcmp(mode, "sieve-fails") == 0) mode = net && strcmp(net, "Sieve") == 0 ? "fail" : "ok";
  if (strcmp(mode, "hang") == 0) {
    signal(SIGUSR1, dump);
    for (;;) pause();
  }
  if (strcmp(mode, "fail") == 0) {
    printf("fakehost:%d:%d [%d] NCCL WARN Fake NCCL: connect to rank %d failed (FAKE_NCCL=fail, NCCL_NET=%s)\n",
           (int)getpid(), (int)getpid(), rank, (rank + 1) % nranks, net ? net : "");
    fflush(stdout);
    return 2;
  }
  printf(
      "{\"bytes\": 1048576, \"count\": 262144, \"dtype\": \"f32\", \"op\": \"sum\", \"nranks\": %d, \"calls\": 20, "
      "\"time_us\": 100.0, \"algbw_GBps\": 10.486, \"busbw_GBps\": 10.486, \"correct\": true}\n",
      nranks);
  fflush(stdout);
  _exit(0);
}

FAKE_EXPORT int ncclCommDestroy(ncclComm_t comm) {
  (void)comm;
  return 0;
}
FAKE_EXPORT int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, void* st) {
  (void)s;
  (void)r;
  (void)n;
  (void)t;
  (void)op;
  (void)c;
  (void)st;
  return 2;
}
FAKE_EXPORT int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, ncclComm_t c, void* st) {
  (void)s;
  (void)r;
  (void)n;
  (void)t;
  (void)root;
  (void)c;
  (void)st;
  return 2;
}
