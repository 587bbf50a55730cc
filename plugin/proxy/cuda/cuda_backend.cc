// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compress/cuda/gather_scatter.h"
#include "compress/tile_layout.h"
#include "net/log.h"
#include "plugin/proxy/cuda/real_nccl.h"

namespace sieve::plugin::proxy {
namespace {

namespace kernels = sieve::compress::cuda;

int cuda_fail(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return kResultSuccess;
  SIEVE_WARN("collective proxy: %s failed: %s", what, cudaGetErrorString(err));
  return kResultCudaError;
}

cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }
ncclComm_t as_comm(Comm c) { return static_cast<ncclComm_t>(const_cast<void*>(c)); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return ncclNumTypes;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  if (is_premul_sum(op)) return ncclRedOp_t(premul_handle(op));
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kAvg: return ncclAvg;
    default: return ncclNumOps;
  }
}

// One ncclCommGetAsyncError into *state, counted in `polling`: never touches a communicator being
// aborted (CommLiveness: the abort waits for `polling` to drop before NCCL frees it), which is
// kResultInvalidUsage with *aborting set. Otherwise the call's own result.
int poll_async_error(Comm comm, CommLiveness& live, ncclResult_t* state, bool* aborting) {
  *aborting = false;
  live.polling.fetch_add(1, std::memory_order_seq_cst);
  if (!live.alive()) {
    live.polling.fetch_sub(1, std::memory_order_seq_cst);
    *aborting = true;
    return kResultInvalidUsage;
  }
  const RealNccl& real = real_nccl();
  const ncclResult_t r = real.comm_get_async_error ? real.comm_get_async_error(as_comm(comm), state) : ncclSystemError;
  live.polling.fetch_sub(1, std::memory_order_seq_cst);
  return int(r);
}

// The communicator's error, or success while it is healthy (in progress counts as healthy). No
// communicator (the kernel tests): nothing to ask.
int comm_error(Comm comm, CommLiveness& live, bool* aborting) {
  *aborting = false;
  if (!comm) return kResultSuccess;
  ncclResult_t state = ncclSuccess;
  if (int rc = poll_async_error(comm, live, &state, aborting)) return *aborting ? rc : kResultSystemError;
  return state == ncclInProgress ? kResultSuccess : int(state);
}

// Waits for `done` without a deadline of its own: a rank that gave up would leave the others inside a
// collective. It ends early when NCCL reports an error on the communicator (a dead peer) or when the
// communicator is being aborted (the job's watchdog): abort always wins.
template <typename Done> int wait_until(Comm comm, CommLiveness& live, const char* what, Done&& done) {
  auto pause = std::chrono::microseconds(2);
  for (;;) {
    const cudaError_t e = done();
    if (e == cudaSuccess) return kResultSuccess;
    if (e != cudaErrorNotReady) return cuda_fail(e, what);
    bool aborting = false;
    if (int rc = comm_error(comm, live, &aborting)) {
      if (!aborting)
        SIEVE_WARN("collective proxy: communicator %p failed (error %d) while waiting for %s", comm, rc, what);
      return rc;
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
  }
}

template <typename T> void free_device(T*& p) {
  if (p) cudaFree(const_cast<void*>(static_cast<const void*>(p)));
  p = nullptr;
}

template <typename T> int upload(const std::vector<T>& host, T** device, const char* what) {
  if (host.empty()) return kResultSuccess;
  if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(device), host.size() * sizeof(T)), what)) return rc;
  return cuda_fail(cudaMemcpy(*device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), what);
}

struct CudaLayout : DeviceLayout {
  ~CudaLayout() override {
    free_device(bits);
    free_device(tile_base);
  }
  uint64_t count() const override { return view.count; }
  uint64_t nnz() const override { return view.nnz; }
  kernels::DeviceLayout view;
  uint32_t* bits = nullptr;
  uint64_t* tile_base = nullptr;
};

struct CudaBuffer : DeviceBuffer {
  ~CudaBuffer() override { free_device(ptr); }
  void* data() override { return ptr; }
  uint64_t bytes() const override { return size; }
  void* ptr = nullptr;
  uint64_t size = 0;
};

struct CudaExchange : Exchange {
  ~CudaExchange() override {
    if (event) cudaEventDestroy(event);
    free_device(device);
    if (host_) cudaFreeHost(host_);
  }
  void* host() override { return host_; }
  uint64_t bytes() const override { return size; }
  void* host_ = nullptr;  // pinned: copies in and out are ordered on the stream without blocking it
  void* device = nullptr;
  uint64_t size = 0;
  cudaEvent_t event = nullptr;
};

struct CudaCounter : ViolationCounter {
  ~CudaCounter() override {
    free_device(device);
    if (host) cudaFreeHost(host);
  }
  // Written by a copy on the stream, read by the host without waiting: a total, so a late read is
  // only a lower one.
  uint64_t seen() const override { return __atomic_load_n(host, __ATOMIC_RELAXED); }
  unsigned long long* device = nullptr;
  uint64_t* host = nullptr;
};

struct CudaSlot : LagSlot {
  ~CudaSlot() override {
    if (event) cudaEventDestroy(event);
    free_device(device_bits);
    free_device(device_flag);
    if (host) cudaFreeHost(host);
  }
  uint32_t* device_bits = nullptr;
  uint64_t* device_flag = nullptr;  // [reduced flag bits]
  uint64_t* host = nullptr;         // pinned: [flag bits, violations, bitmap words...]
  uint64_t words32 = 0;
  cudaEvent_t event = nullptr;
};

const kernels::DeviceLayout& view_of(const DeviceLayout& l) { return static_cast<const CudaLayout&>(l).view; }

// What graphs held and have released. CUDA runs a user object's destructor on a thread of its own,
// where no CUDA call is allowed (and a plan's last reference frees device memory), possibly while the
// process exits: the destructor only moves the reference here, and the next allocation drops it.
// Process-wide and never destroyed, because graphs are.
struct GraphReleases {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> released;
};

GraphReleases& graph_releases() {
  static GraphReleases* releases = new GraphReleases();
  return *releases;
}

void CUDART_CB graph_released(void* hold) {
  auto* keep = static_cast<std::shared_ptr<void>*>(hold);
  GraphReleases& r = graph_releases();
  {
    std::lock_guard lock(r.mutex);
    r.released.push_back(std::move(*keep));
  }
  delete keep;
}

void free_graph_releases() {
  std::vector<std::shared_ptr<void>> gone;
  GraphReleases& r = graph_releases();
  std::lock_guard lock(r.mutex);
  gone.swap(r.released);
  // `gone` is destroyed after the lock is released, on this (host) thread.
}

}  // namespace

std::string cuda_problem() {
  int driver = 0, runtime = 0, devices = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (driver == 0) return "no CUDA driver is installed";
  if (driver < runtime)
    return "the CUDA driver supports CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
           ", older than the CUDA runtime " + std::to_string(runtime / 1000) + "." +
           std::to_string(runtime % 1000 / 10) +
           " this library was built with (update the driver, or build Sieve with an older toolkit)";
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) return std::string("CUDA reports: ") + cudaGetErrorString(e);
  if (devices == 0) return "no CUDA device is visible";
  return "";
}

int CudaBackend::all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm,
                            Stream stream) {
  const RealNccl& real = real_nccl();
  if (!real.all_reduce) return kResultSystemError;
  if (nccl_type(type) == ncclNumTypes || nccl_op(op) == ncclNumOps) return kResultInvalidArgument;
  return real.all_reduce(send, recv, size_t(count), nccl_type(type), nccl_op(op), as_comm(comm), as_stream(stream));
}

int CudaBackend::reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                                Stream stream) {
  const RealNccl& real = real_nccl();
  if (!real.reduce_scatter) return kResultSystemError;
  if (nccl_type(type) == ncclNumTypes || nccl_op(op) == ncclNumOps) return kResultInvalidArgument;
  return real.reduce_scatter(send, recv, size_t(recv_count), nccl_type(type), nccl_op(op), as_comm(comm),
                             as_stream(stream));
}

int CudaBackend::all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream stream) {
  const RealNccl& real = real_nccl();
  if (!real.all_gather) return kResultSystemError;
  if (nccl_type(type) == ncclNumTypes) return kResultInvalidArgument;
  return real.all_gather(send, recv, size_t(send_count), nccl_type(type), as_comm(comm), as_stream(stream));
}

int CudaBackend::group_start() {
  const RealNccl& real = real_nccl();
  return real.group_start ? int(real.group_start()) : kResultSystemError;
}

int CudaBackend::group_end() {
  const RealNccl& real = real_nccl();
  return real.group_end ? int(real.group_end()) : kResultSystemError;
}

int CudaBackend::group_simulate_end(void* sim_info) {
  const RealNccl& real = real_nccl();
  if (!real.group_simulate_end) {
    SIEVE_WARN("collective proxy: this NCCL has no ncclGroupSimulateEnd (it came with NCCL 2.22)");
    return kResultInvalidUsage;
  }
  return int(real.group_simulate_end(static_cast<ncclSimInfo_t*>(sim_info)));
}

int CudaBackend::comm_shape(Comm comm, int* nranks, int* rank) {
  const RealNccl& real = real_nccl();
  if (!real.comm_count || !real.comm_user_rank) return kResultSystemError;
  if (ncclResult_t r = real.comm_count(as_comm(comm), nranks); r != ncclSuccess) return int(r);
  return int(real.comm_user_rank(as_comm(comm), rank));
}

int CudaBackend::wait_enqueued(Comm comm, CommLiveness& live) {
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    bool aborting = false;
    if (int rc = poll_async_error(comm, live, &state, &aborting)) return rc;
    if (state != ncclInProgress) return int(state);
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(500)) pause *= 2;
  }
}

int CudaBackend::abort_comm(Comm comm) {
  const RealNccl& real = real_nccl();
  // Revoked, the handle stays valid until the job tears it down: a call Sieve does not interpose
  // (send/recv, broadcast, split, a watchdog's poll) cannot reach freed memory.
  if (real.comm_revoke) return int(real.comm_revoke(as_comm(comm), NCCL_REVOKE_DEFAULT));
  return real.comm_abort ? int(real.comm_abort(as_comm(comm))) : kResultSystemError;
}

bool CudaBackend::abort_keeps_handle() const { return real_nccl().comm_revoke != nullptr; }

int CudaBackend::comm_async_error(Comm comm, int* error) {
  const RealNccl& real = real_nccl();
  if (!real.comm_get_async_error) return kResultSystemError;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = real.comm_get_async_error(as_comm(comm), &state);
  *error = int(state);
  return int(rc);
}

int CudaBackend::capture_status(Stream stream, bool* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(as_stream(stream), &status);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const std::string why = cuda_problem();
    SIEVE_WARN("collective proxy: CUDA cannot query the caller's stream: %s%s%s", cudaGetErrorString(e),
               why.empty() ? "" : "; ", why.c_str());
    return kResultCudaError;
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return kResultSuccess;
}

bool CudaBackend::keep_for_graph(Stream stream, std::shared_ptr<void> keep) {
  free_graph_releases();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  if (cudaStreamGetCaptureInfo(as_stream(stream), &status, nullptr, &graph) != cudaSuccess ||
      status != cudaStreamCaptureStatusActive || !graph) {
    cudaGetLastError();
    return false;
  }
  // Released with the graph and every executable graph made from it, after their last launch.
  auto* hold = new std::shared_ptr<void>(std::move(keep));
  cudaUserObject_t object = nullptr;
  if (cudaUserObjectCreate(&object, hold, graph_released, 1, cudaUserObjectNoDestructorSync) != cudaSuccess) {
    cudaGetLastError();
    delete hold;
    return false;
  }
  if (cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove) != cudaSuccess) {
    cudaGetLastError();
    cudaUserObjectRelease(object, 1);  // its destructor hands the reference back, freed later
    return false;
  }
  return true;
}

int CudaBackend::create_exchange(uint64_t bytes, std::unique_ptr<Exchange>* out) {
  free_graph_releases();
  auto ex = std::make_unique<CudaExchange>();
  const char* what = "an exchange's allocation";
  if (int rc = cuda_fail(cudaHostAlloc(&ex->host_, bytes ? bytes : 1, cudaHostAllocDefault), what)) return rc;
  if (int rc = cuda_fail(cudaMalloc(&ex->device, bytes ? bytes : 1), what)) return rc;
  if (int rc = cuda_fail(cudaEventCreateWithFlags(&ex->event, cudaEventDisableTiming), what)) return rc;
  ex->size = bytes;
  *out = std::move(ex);
  return kResultSuccess;
}

int CudaBackend::exchange_in(Exchange& exchange, void* device, uint64_t count, int width, Comm comm, Stream stream) {
  auto& ex = static_cast<CudaExchange&>(exchange);
  const RealNccl& real = real_nccl();
  if (!real.all_reduce) return kResultSystemError;
  const uint64_t bytes = count * uint64_t(width);
  if (ex.size < bytes || (width != 1 && width != 8)) return kResultInternalError;
  void* target = device ? device : ex.device;
  cudaStream_t s = as_stream(stream);
  if (int rc = cuda_fail(cudaMemcpyAsync(target, ex.host_, bytes, cudaMemcpyHostToDevice, s), "an exchange's upload"))
    return rc;
  // int64 words: the same collective as a binding's commit token (sieve.h), also where no proxy runs.
  return real.all_reduce(target, target, size_t(count), width == 8 ? ncclInt64 : ncclUint8, ncclMax, as_comm(comm), s);
}

int CudaBackend::exchange_out(Exchange& exchange, const void* device, uint64_t count, int width, Stream stream) {
  auto& ex = static_cast<CudaExchange&>(exchange);
  const void* source = device ? device : ex.device;
  cudaStream_t s = as_stream(stream);
  if (int rc = cuda_fail(cudaMemcpyAsync(ex.host_, source, count * uint64_t(width), cudaMemcpyDeviceToHost, s),
                         "an exchange's download"))
    return rc;
  return cuda_fail(cudaEventRecord(ex.event, s), "an exchange's event");
}

int CudaBackend::wait_exchange(Exchange& exchange, Comm comm, CommLiveness& live) {
  auto& ex = static_cast<CudaExchange&>(exchange);
  return wait_until(comm, live, "an exchange", [&ex] { return cudaEventQuery(ex.event); });
}

int CudaBackend::download(const void* device, void* host, uint64_t bytes, Stream stream, Comm comm,
                          CommLiveness& live) {
  cudaStream_t s = as_stream(stream);
  if (int rc = wait_until(comm, live, "a result to compare", [s] { return cudaStreamQuery(s); })) return rc;
  // The stream is idle: this copy waits for nothing else.
  if (int rc = cuda_fail(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), "a download")) return rc;
  return cuda_fail(cudaStreamSynchronize(s), "a download");
}

int CudaBackend::create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                               std::unique_ptr<DeviceLayout>* out) {
  free_graph_releases();
  const compress::TileLayout host = compress::build_tile_layout(mask, first, count);
  auto layout = std::make_unique<CudaLayout>();
  if (int rc = upload(host.bits, &layout->bits, "the upload of a mask layout")) return rc;
  if (int rc = upload(host.tile_base, &layout->tile_base, "the upload of a mask layout")) return rc;
  layout->view.count = host.count;
  layout->view.nnz = host.nnz;
  layout->view.bits = layout->bits;
  layout->view.tile_base = layout->tile_base;
  *out = std::move(layout);
  return kResultSuccess;
}

int CudaBackend::create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) {
  free_graph_releases();
  auto buffer = std::make_unique<CudaBuffer>();
  if (int rc = cuda_fail(cudaMalloc(&buffer->ptr, bytes ? bytes : 1), "a device allocation")) return rc;
  buffer->size = bytes;
  *out = std::move(buffer);
  return kResultSuccess;
}

int CudaBackend::create_counter(std::unique_ptr<ViolationCounter>* out) {
  auto counter = std::make_unique<CudaCounter>();
  const char* what = "a mask violation counter";
  if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&counter->device), sizeof(uint64_t)), what)) return rc;
  if (int rc = cuda_fail(cudaMemset(counter->device, 0, sizeof(uint64_t)), what)) return rc;
  if (int rc = cuda_fail(
          cudaHostAlloc(reinterpret_cast<void**>(&counter->host), sizeof(uint64_t), cudaHostAllocDefault), what))
    return rc;
  *counter->host = 0;
  *out = std::move(counter);
  return kResultSuccess;
}

int CudaBackend::count_pruned(const DeviceLayout& layout, size_t es, const void* src, ViolationCounter& counter,
                              bool copy, Stream stream) {
  auto& c = static_cast<CudaCounter&>(counter);
  if (int rc = cuda_fail(cudaError_t(kernels::count_pruned(view_of(layout), es, src, c.device, stream)),
                         "the mask violation count kernel"))
    return rc;
  if (!copy) return kResultSuccess;
  return cuda_fail(cudaMemcpyAsync(c.host, c.device, sizeof(uint64_t), cudaMemcpyDeviceToHost, as_stream(stream)),
                   "a mask violation count's copy");
}

int CudaBackend::gather(const DeviceLayout& layout, size_t es, const void* src, void* compact, Stream stream) {
  return cuda_fail(cudaError_t(kernels::gather(view_of(layout), es, src, compact, stream)), "the gather kernel");
}

int CudaBackend::scatter(const DeviceLayout& layout, size_t es, const void* compact, void* dst, Stream stream) {
  return cuda_fail(cudaError_t(kernels::scatter(view_of(layout), es, compact, dst, stream)), "the scatter kernel");
}

int CudaBackend::check(const DeviceLayout& layout, size_t es, const void* src, void* flag, const FlagEncoding& encoding,
                       DeviceBuffer& counter, Stream stream) {
  return cuda_fail(
      cudaError_t(kernels::check_pruned(view_of(layout), es, src, flag, encoding.ok_bits, encoding.bad_bits,
                                        static_cast<unsigned long long*>(counter.data()), stream)),
      "the mask check kernel");
}

int CudaBackend::create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) {
  auto slot = std::make_unique<CudaSlot>();
  slot->words32 = (count + 31) / 32;
  const size_t host_bytes = 2 * sizeof(uint64_t) + slot->words32 * sizeof(uint32_t);
  const char* what = "a learned-mask record's allocation";
  if (int rc = cuda_fail(cudaHostAlloc(reinterpret_cast<void**>(&slot->host), host_bytes, cudaHostAllocDefault), what))
    return rc;
  if (int rc =
          cuda_fail(cudaMalloc(reinterpret_cast<void**>(&slot->device_bits), slot->words32 * sizeof(uint32_t)), what))
    return rc;
  if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&slot->device_flag), sizeof(uint64_t)), what)) return rc;
  if (int rc = cuda_fail(cudaEventCreateWithFlags(&slot->event, cudaEventDisableTiming), what)) return rc;
  *out = std::move(slot);
  return kResultSuccess;
}

int CudaBackend::record_nonzero(LagSlot& slot, const void* buf, uint64_t count, DType type, Stream stream) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc =
          cuda_fail(cudaError_t(kernels::nonzero_bitmap(compress::dtype_size(type), buf, count, s.device_bits, stream)),
                    "the nonzero-pattern kernel"))
    return rc;
  if (int rc = cuda_fail(cudaMemcpyAsync(s.host + 2, s.device_bits, s.words32 * sizeof(uint32_t),
                                         cudaMemcpyDeviceToHost, as_stream(stream)),
                         "a learned-mask record's copy"))
    return rc;
  return cuda_fail(cudaEventRecord(s.event, as_stream(stream)), "a learned-mask record's event");
}

int CudaBackend::record_flag(LagSlot& slot, const void* flag, size_t es, DeviceBuffer& counter, Stream stream) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = cuda_fail(cudaError_t(kernels::copy_element(es, flag, s.device_flag, stream)), "the flag copy"))
    return rc;
  if (int rc =
          cuda_fail(cudaMemcpyAsync(s.host, s.device_flag, sizeof(uint64_t), cudaMemcpyDeviceToHost, as_stream(stream)),
                    "a learned-mask record's copy"))
    return rc;
  if (int rc = cuda_fail(
          cudaMemcpyAsync(s.host + 1, counter.data(), sizeof(uint64_t), cudaMemcpyDeviceToHost, as_stream(stream)),
          "a learned-mask record's copy"))
    return rc;
  return cuda_fail(cudaEventRecord(s.event, as_stream(stream)), "a learned-mask record's event");
}

int CudaBackend::read_nonzero(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t count, compress::Mask* nonzero) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = wait_until(comm, live, "a learned-mask record", [&s] { return cudaEventQuery(s.event); })) return rc;
  nonzero->assign_bitmap(reinterpret_cast<const uint8_t*>(s.host + 2), count);
  return kResultSuccess;
}

int CudaBackend::read_flag(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t* flag_bits,
                           uint64_t* local_violations) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = wait_until(comm, live, "a learned-mask flag", [&s] { return cudaEventQuery(s.event); })) return rc;
  *flag_bits = s.host[0];
  *local_violations = s.host[1];
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
