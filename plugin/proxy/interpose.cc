// The interposed NCCL entry points. Under LD_PRELOAD the dynamic linker binds a trainer's calls to
// ncclAllReduce/ncclGroupStart/ncclGroupEnd here; when NCCL merely dlopens this library as its net
// plugin nobody calls them. Each call either passes straight to the real NCCL or goes through the
// process's Proxy; the proxy's own collectives use the real symbols (real_nccl.h), and a thread
// already inside the proxy passes straight through, so nothing re-enters. No exception leaves.
#include <nccl.h>

#include <memory>

#include "net/log.h"
#include "plugin/config.h"
#include "plugin/proxy/cuda_backend.h"
#include "plugin/proxy/proxy.h"
#include "plugin/proxy/real_nccl.h"
#include "plugin/sieve_api.h"
#include "plugin/stats.h"

namespace sieve::plugin::proxy {
namespace {

thread_local bool t_inside = false;

struct Inside {
  Inside() { t_inside = true; }
  ~Inside() { t_inside = false; }
};

ElemType elem_type(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return ElemType::kF32;
    case ncclFloat16: return ElemType::kF16;
    case ncclBfloat16: return ElemType::kBF16;
    case ncclFloat64: return ElemType::kF64;
    default: return ElemType::kOther;
  }
}

ReduceOp reduce_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return ReduceOp::kSum;
    case ncclProd: return ReduceOp::kProd;
    case ncclMax: return ReduceOp::kMax;
    case ncclMin: return ReduceOp::kMin;
    case ncclAvg: return ReduceOp::kAvg;
    default: return ReduceOp::kOther;  // PreMulSum and user-created ops
  }
}

ProxyOptions options_from(const config::Settings& s) {
  ProxyOptions o;
  o.track = s.track;
  o.track_stable = uint32_t(s.track_stable < 1 ? 1 : s.track_stable);
  o.track_lag = uint32_t(s.track_lag < 1 ? 1 : s.track_lag);
  o.max_density = double(s.proxy_max_density < 0 ? 0 : s.proxy_max_density) / 100.0;
  o.min_count = uint64_t(s.proxy_min_count < 1 ? 1 : s.proxy_min_count);
  return o;
}

// Null when SIEVE_PROXY=off. Built on first use: the library may be loaded long before CUDA is.
Proxy* process_proxy() {
  static Proxy* proxy = []() -> Proxy* {
    const config::Settings& s = config::Registry::process().settings();
    if (!s.proxy) return nullptr;
    static CudaBackend backend;
    static Proxy instance(backend, mask_registry(), options_from(s), process_stats());
    SIEVE_INFO("collective proxy: active (track %s, lag %lld, max density %lld%%, min count %lld)",
               s.track ? "on" : "off", (long long)s.track_lag, (long long)s.proxy_max_density,
               (long long)s.proxy_min_count);
    return &instance;
  }();
  return proxy;
}

template <typename Body> ncclResult_t guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    SIEVE_WARN("collective proxy: unexpected failure");
    return ncclInternalError;
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy

using namespace sieve::plugin::proxy;

extern "C" {

__attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                                   ncclDataType_t datatype, ncclRedOp_t op,
                                                                   ncclComm_t comm, cudaStream_t stream) {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = real_nccl();
    if (!real.all_reduce) return ncclSystemError;
    Proxy* proxy = t_inside ? nullptr : process_proxy();
    const ElemType type = elem_type(datatype);
    const ReduceOp rop = reduce_op(op);
    if (!proxy || type == ElemType::kOther || rop == ReduceOp::kOther) {
      if (proxy) sieve::plugin::add(sieve::plugin::process_stats().collectives_dense, 1);
      return real.all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    }
    Inside inside;
    return ncclResult_t(proxy->all_reduce(sendbuff, recvbuff, count, type, rop, comm, stream));
  });
}

__attribute__((visibility("default"))) ncclResult_t ncclGroupStart() {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = real_nccl();
    if (!real.group_start) return ncclSystemError;
    Proxy* proxy = t_inside ? nullptr : process_proxy();
    if (!proxy) return real.group_start();
    Inside inside;
    return ncclResult_t(proxy->group_start());
  });
}

__attribute__((visibility("default"))) ncclResult_t ncclGroupEnd() {
  return guarded([&]() -> ncclResult_t {
    const RealNccl& real = real_nccl();
    if (!real.group_end) return ncclSystemError;
    Proxy* proxy = t_inside ? nullptr : process_proxy();
    if (!proxy) return real.group_end();
    Inside inside;
    return ncclResult_t(proxy->group_end());
  });
}

}  // extern "C"
