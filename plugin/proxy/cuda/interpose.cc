// SPDX-License-Identifier: Apache-2.0
// The interposed NCCL entry points. Under LD_PRELOAD the dynamic linker binds a trainer's calls to
// the collectives, the group calls and the communicator teardown calls here (and their pnccl*
// aliases, which share NCCL's group state); when NCCL merely dlopens this library as its net plugin
// nobody calls them. Each call goes through the process's Proxy or straight to the real NCCL; the
// proxy's own collectives use the real symbols (real_nccl.h), and a thread already inside the proxy
// passes straight through, so nothing re-enters. No exception leaves.
#include <nccl.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "net/log.h"
#include "plugin/config.h"
#include "plugin/process_log.h"
#include "plugin/proxy/cuda/cuda_backend.h"
#include "plugin/proxy/cuda/real_nccl.h"
#include "plugin/proxy/hang_dump.h"
#include "plugin/proxy/proxy.h"
#include "plugin/proxy_probe.h"
#include "plugin/sieve_api.h"
#include "plugin/stats.h"

namespace sieve::plugin::proxy {
namespace {

thread_local bool t_inside = false;

struct Inside {
  Inside() { t_inside = true; }
  ~Inside() { t_inside = false; }
};

// The types the proxy follows: the floating ones it compacts, and int64 (a commit token; never
// compacted). Any other goes to NCCL untouched (none).
std::optional<DType> elem_type(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return DType::kF32;
    case ncclFloat16: return DType::kF16;
    case ncclBfloat16: return DType::kBF16;
    case ncclFloat64: return DType::kF64;
    case ncclInt64: return DType::kI64;
    default: return std::nullopt;
  }
}

// NCCL's op as the proxy knows it: a pre-multiplied sum only once the proxy saw NCCL create it on
// this communicator (the handle is the communicator's own).
ReduceOp reduce_op(ncclRedOp_t op, ncclComm_t comm, Proxy* proxy) {
  if (int(op) >= int(ncclNumOps))
    return proxy->premul_sum_known(comm, int32_t(op)) ? premul_sum(int32_t(op)) : ReduceOp::kOther;
  switch (op) {
    case ncclSum: return ReduceOp::kSum;
    case ncclProd: return ReduceOp::kProd;
    case ncclMax: return ReduceOp::kMax;
    case ncclMin: return ReduceOp::kMin;
    case ncclAvg: return ReduceOp::kAvg;
    default: return ReduceOp::kOther;
  }
}

ProxyOptions options_from(const config::Settings& s) {
  ProxyOptions o;
  o.enabled = s.proxy;
  o.track = s.track;
  o.verify = s.proxy_verify;
  o.track_stable = uint32_t(s.track_stable);
  o.track_lag = uint32_t(s.track_lag);
  o.rules.max_density = double(s.proxy_max_density) / 100.0;
  o.rules.min_count = uint64_t(s.proxy_min_count);
  return o;
}

// A report of every communicator's recent collectives: in the log, and beside SIEVE_STATS_FILE.
void report(const std::string& text) {
  SIEVE_WARN("%s", text.c_str());
  const std::string path = dump_path(config::Registry::process().settings().stats_file);
  if (path.empty()) return;
  // Where the reports go once another user took the predictable name: one file for the process.
  static std::mutex mutex;
  static std::string fallback;
  std::lock_guard<std::mutex> lock(mutex);
  std::string why, note;
  if (!append_report(path, text, &why, &fallback, &note)) SIEVE_WARN("collective proxy: %s", why.c_str());
  if (!note.empty()) SIEVE_WARN("collective proxy: %s", note.c_str());
}

// The process's proxy once built, for the dump signal's helper thread (which must not build it).
std::atomic<Proxy*> g_proxy{nullptr};

// Built on first use: the library may be loaded long before CUDA or NCCL is.
Proxy& process_proxy() {
  static Proxy* proxy = [] {
    const config::Settings& s = config::Registry::process().settings();
    static CudaBackend backend;
    static Proxy instance(backend, mask_registry(), options_from(s), process_stats());
    instance.set_report_sink(&report);
    SIEVE_INFO("collective proxy: %s (track %s, lag %lld, max density %lld%%, min count %lld, verify %s)",
               s.proxy ? "active" : "off (calls pass through; this rank refuses every commit)",
               config::choice_text(s.track).c_str(), (long long)s.track_lag, (long long)s.proxy_max_density,
               (long long)s.proxy_min_count, s.proxy_verify ? "on" : "off");
    g_proxy.store(&instance, std::memory_order_release);
    return &instance;
  }();
  return *proxy;
}

// SIEVE_DUMP_SIGNAL's report, on its helper thread: the proxy's state, or that it has none yet (a
// rank hung in ncclCommInitRank). In a forked child, the child's own.
void dump_on_signal() {
  if (Proxy* proxy = g_proxy.load(std::memory_order_acquire)) {
    report(proxy->describe_state("SIEVE_DUMP_SIGNAL"));
    return;
  }
  report("collective proxy state (SIEVE_DUMP_SIGNAL): no NCCL call has reached the proxy in process " +
         std::to_string(getpid()) + " yet");
}

// Installed at the process's first interposed NCCL call (ncclCommInitRank or earlier), not when the
// library loads: a preloaded library must start nothing the host program did not ask for, and its
// helper thread broke programs that change credentials (glibc's set-id calls must reach every thread;
// `setpriv --clear-groups` aborted). A rank hung in NCCL's init has made that call, so a signal sent
// to it reports rather than kills it (SIGUSR1's default action). A handler the process already has is
// kept and called after ours.
bool install_dump_signal_for_process() {
  if (!preloaded()) return false;
  const config::DumpSignal signal = config::Registry::process().settings().dump_signal;
  if (signal == config::DumpSignal::kOff) return false;
  std::string why;
  const int signo = signal == config::DumpSignal::kUsr2 ? SIGUSR2 : SIGUSR1;
  if (install_dump_signal(signo, &dump_on_signal, &why)) return true;
  if (!why.empty())
    SIEVE_WARN("collective proxy: no state report on SIG%s: %s", signo == SIGUSR2 ? "USR2" : "USR1", why.c_str());
  return false;
}

// Every interposed call starts here: the process's log is set up (SIEVE_LOG_LEVEL, each configuration
// problem warned once) before anything can warn, also in a job that preloads the proxy without
// Sieve as its net plugin, whose init would otherwise do it; and a forked child's state reports
// start (the first safe point after its fork), and SIEVE_DUMP_SIGNAL's handler is installed.
const RealNccl& nccl_for_call() {
  start_forked_dump_reader();
  note_nccl_in_use();
  start_process_log();
  static const bool dump_signal_installed = install_dump_signal_for_process();
  (void)dump_signal_installed;
  return real_nccl();
}

// The proxy, or null when this call must go straight to NCCL (re-entry from the proxy itself).
Proxy* proxy_for_call() { return t_inside ? nullptr : &process_proxy(); }

template <typename Body> ncclResult_t guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    SIEVE_WARN("collective proxy: unexpected failure");
    return ncclInternalError;
  }
}

// A new communicator may get the address of one the proxy aborted (whose handle NCCL freed): the
// proxy forgets whatever it knew at that address, so the new one is never taken for the dead one,
// and the dead handle's teardown, if still to come, never reaches the new one.
template <typename Create> ncclResult_t created(ncclComm_t* out, Create&& create) {
  return guarded([&]() -> ncclResult_t {
    const ncclResult_t rc = create();
    if ((rc == ncclSuccess || rc == ncclInProgress) && out && *out && !t_inside) process_proxy().created(*out);
    return rc;
  });
}

// Once per process, whichever notices first (an interposed call, or the probe at the plugin's init).
void warn_nccl_unreachable_once() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    SIEVE_WARN(
        "collective proxy: inactive, the real NCCL cannot be reached (interposed NCCL calls fail with "
        "ncclSystemError): %s",
        real_nccl_problem().c_str());
}

ncclResult_t unreachable() {
  warn_nccl_unreachable_once();
  return ncclSystemError;
}

// Run at the net plugin's init (NCCL is loaded by then): a proxy that was LD_PRELOADed but can never
// see a collective says so once, naming the cause, instead of running silently dense.
void probe() {
  note_nccl_in_use();
  if (!preloaded()) return;
  if (!config::Registry::process().settings().proxy) return;
  if (!real_nccl_problem().empty()) warn_nccl_unreachable_once();
  const std::string cuda = cuda_problem();
  if (!cuda.empty()) SIEVE_WARN("collective proxy: cannot compact anything: %s", cuda.c_str());
}

const bool kProbeRegistered = (register_proxy_probe(&probe), true);

// --- the C API's commit (sieve.h), served here ---

void fill(const CommitOutcome& o, sieve_commit_result_t* out) {
  sieve_commit_result_t full;
  std::memset(&full, 0, sizeof full);
  full.size = std::min(out->size, sizeof full);
  full.state = o.state == CommitOutcome::State::kActivated ? SIEVE_COMMIT_ACTIVATED
               : o.state == CommitOutcome::State::kPending ? SIEVE_COMMIT_PENDING
                                                           : SIEVE_COMMIT_REFUSED;
  full.commit = o.commit;
  full.masks = o.masks;
  full.compacting = o.compacting;
  std::snprintf(full.reason, sizeof full.reason, "%s", o.reason.c_str());
  std::memcpy(out, &full, full.size);
}

int commit_api(void* comm, void* stream, uint32_t flags, sieve_commit_result_t* result) {
  const RealNccl& real = nccl_for_call();
  if (!real.complete()) {
    warn_nccl_unreachable_once();
    return kCommitUnreachable;
  }
  Proxy* proxy = proxy_for_call();
  if (!proxy) return ncclInvalidUsage;  // called from inside the proxy itself
  Inside inside;
  CommitOutcome outcome;
  const int rc = proxy->commit(comm, stream, flags, &outcome);
  if (result) fill(outcome, result);
  return rc;
}

void arm_api(const void* token, uint32_t flags) { process_proxy().arm_commit(token, flags); }

bool outcome_api(const void* token, sieve_commit_result_t* result) {
  CommitOutcome outcome;
  if (!process_proxy().commit_outcome(token, &outcome)) return false;
  fill(outcome, result);
  return true;
}

const ProxyCommitApi kCommitApi{&commit_api, &arm_api, &outcome_api};
const bool kCommitApiRegistered = (register_proxy_commit_api(&kCommitApi), true);

}  // namespace
}  // namespace sieve::plugin::proxy

using namespace sieve::plugin::proxy;

#define SIEVE_EXPORT __attribute__((visibility("default")))
// NCCL exports every entry point twice, nccl* and pnccl* (its profiling aliases), with one group
// state behind both: interposing one name only would let the proxy lose track of NCCL's groups.
#define SIEVE_ALIAS(name) __attribute__((alias(#name), visibility("default")))

extern "C" {

SIEVE_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    Inside inside;
    const ReduceOp reduction = reduce_op(op, comm, proxy);
    const std::optional<DType> type = elem_type(datatype);
    if (!type || reduction == ReduceOp::kOther) {
      if (int rc = proxy->pass_through(comm, CallKind::kAllReduce, count)) return ncclResult_t(rc);
      return real.all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    }
    return ncclResult_t(proxy->all_reduce(sendbuff, recvbuff, count, *type, reduction, comm, stream));
  });
}

SIEVE_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    Inside inside;
    const ReduceOp reduction = reduce_op(op, comm, proxy);
    const std::optional<DType> type = elem_type(datatype);
    if (!type || reduction == ReduceOp::kOther) {
      if (int rc = proxy->pass_through(comm, CallKind::kReduceScatter, recvcount)) return ncclResult_t(rc);
      return real.reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    }
    return ncclResult_t(proxy->reduce_scatter(sendbuff, recvbuff, recvcount, *type, reduction, comm, stream));
  });
}

SIEVE_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                        ncclComm_t comm, cudaStream_t stream) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    Inside inside;
    const std::optional<DType> type = elem_type(datatype);
    if (!type) {
      if (int rc = proxy->pass_through(comm, CallKind::kAllGather, sendcount)) return ncclResult_t(rc);
      return real.all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    }
    return ncclResult_t(proxy->all_gather(sendbuff, recvbuff, sendcount, *type, comm, stream));
  });
}

SIEVE_EXPORT ncclResult_t ncclGroupStart() {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.group_start();
    Inside inside;
    return ncclResult_t(proxy->group_start());
  });
}

SIEVE_EXPORT ncclResult_t ncclGroupEnd() {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.group_end();
    Inside inside;
    return ncclResult_t(proxy->group_end());
  });
}

SIEVE_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    Proxy* proxy = proxy_for_call();
    if (!proxy) return real.group_simulate_end ? real.group_simulate_end(simInfo) : ncclInvalidUsage;
    Inside inside;
    return ncclResult_t(proxy->group_simulate_end(simInfo));
  });
}

// Teardown: the proxy forgets the communicator first; a handle the proxy itself aborted is dead and
// never reaches NCCL again.
SIEVE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    if (t_inside) return real.comm_destroy(comm);
    return process_proxy().teardown(comm, nullptr) ? real.comm_destroy(comm) : ncclSuccess;
  });
}

SIEVE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    if (t_inside) return real.comm_abort(comm);
    return process_proxy().teardown(comm, "ncclCommAbort") ? real.comm_abort(comm) : ncclSuccess;
  });
}

SIEVE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete() || !real.comm_finalize) return unreachable();
    if (!t_inside && process_proxy().dead_handle(comm)) return ncclSuccess;
    return real.comm_finalize(comm);
  });
}

// A watchdog thread polls this while another thread may be aborting the communicator (the proxy
// after a local failure, or the job): the proxy answers for a handle an abort has begun on.
SIEVE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete()) return unreachable();
    if (t_inside || !asyncError) return real.comm_get_async_error(comm, asyncError);
    int error = ncclSuccess;
    const int rc = process_proxy().async_error(comm, &error);
    if (rc == ncclSuccess) *asyncError = ncclResult_t(error);
    return ncclResult_t(rc);
  });
}

SIEVE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_init_rank) return unreachable();
  return created(comm, [&] { return real.comm_init_rank(comm, nranks, commId, rank); });
}

SIEVE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                 ncclConfig_t* config) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_init_rank_config) return unreachable();
  return created(comm, [&] { return real.comm_init_rank_config(comm, nranks, commId, rank, config); });
}

SIEVE_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                                   ncclUniqueId* commIds, ncclConfig_t* config) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_init_rank_scalable) return unreachable();
  return created(comm, [&] { return real.comm_init_rank_scalable(comm, nranks, rank, nId, commIds, config); });
}

SIEVE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_init_all) return unreachable();
  return guarded([&]() -> ncclResult_t {
    const ncclResult_t rc = real.comm_init_all(comms, ndev, devlist);
    if (rc == ncclSuccess && comms && !t_inside)
      for (int i = 0; i < ndev; ++i)
        if (comms[i]) process_proxy().created(comms[i]);
    return rc;
  });
}

SIEVE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* config) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_split) return unreachable();
  return created(newcomm, [&] { return real.comm_split(comm, color, key, newcomm, config); });
}

SIEVE_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int excludeCount, ncclComm_t* newcomm,
                                         ncclConfig_t* config, int flags) {
  const RealNccl& real = nccl_for_call();
  if (!real.comm_shrink) return unreachable();
  return created(newcomm, [&] { return real.comm_shrink(comm, exclude, excludeCount, newcomm, config, flags); });
}

// Pre-multiplied sums (FSDP's bf16 and averaged reduces): the proxy learns which handles are sums.
SIEVE_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                   ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete() || !real.red_op_create_pre_mul_sum) return unreachable();
    const ncclResult_t rc = real.red_op_create_pre_mul_sum(op, scalar, datatype, residence, comm);
    Proxy* proxy = proxy_for_call();
    if (rc == ncclSuccess && proxy && op) {
      Inside inside;
      proxy->premul_sum_created(comm, int32_t(*op));
    }
    return rc;
  });
}

SIEVE_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = nccl_for_call();
    if (!real.complete() || !real.red_op_destroy) return unreachable();
    if (Proxy* proxy = proxy_for_call()) {
      Inside inside;
      proxy->premul_sum_destroyed(comm, int32_t(op));
    }
    return real.red_op_destroy(op, comm);
  });
}

ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
    SIEVE_ALIAS(ncclAllReduce);
ncclResult_t pncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
    SIEVE_ALIAS(ncclReduceScatter);
ncclResult_t pncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)
    SIEVE_ALIAS(ncclAllGather);
ncclResult_t pncclGroupStart() SIEVE_ALIAS(ncclGroupStart);
ncclResult_t pncclGroupEnd() SIEVE_ALIAS(ncclGroupEnd);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t*) SIEVE_ALIAS(ncclGroupSimulateEnd);
ncclResult_t pncclCommDestroy(ncclComm_t) SIEVE_ALIAS(ncclCommDestroy);
ncclResult_t pncclCommAbort(ncclComm_t) SIEVE_ALIAS(ncclCommAbort);
ncclResult_t pncclCommFinalize(ncclComm_t) SIEVE_ALIAS(ncclCommFinalize);
ncclResult_t pncclCommGetAsyncError(ncclComm_t, ncclResult_t*) SIEVE_ALIAS(ncclCommGetAsyncError);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t)
    SIEVE_ALIAS(ncclRedOpCreatePreMulSum);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t, ncclComm_t) SIEVE_ALIAS(ncclRedOpDestroy);
ncclResult_t pncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) SIEVE_ALIAS(ncclCommInitRank);
ncclResult_t pncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*)
    SIEVE_ALIAS(ncclCommInitRankConfig);
ncclResult_t pncclCommInitRankScalable(ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*)
    SIEVE_ALIAS(ncclCommInitRankScalable);
ncclResult_t pncclCommInitAll(ncclComm_t*, int, const int*) SIEVE_ALIAS(ncclCommInitAll);
ncclResult_t pncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) SIEVE_ALIAS(ncclCommSplit);
ncclResult_t pncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) SIEVE_ALIAS(ncclCommShrink);

}  // extern "C"
