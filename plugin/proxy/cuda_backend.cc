#include "plugin/proxy/cuda_backend.h"

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "compress/cuda/gather_scatter.h"
#include "net/log.h"
#include "plugin/proxy/real_nccl.h"

namespace sieve::plugin::proxy {
namespace {

namespace kernels = sieve::compress::cuda;

// A wait on the GPU that never ends means a peer died inside a collective; give up after this.
constexpr auto kWaitLimit = std::chrono::seconds(300);

int cuda_fail(int err, const char* what) {
  if (err == cudaSuccess) return kResultSuccess;
  SIEVE_WARN("collective proxy: %s failed: %s", what, cudaGetErrorString(cudaError_t(err)));
  return kResultCudaError;
}

cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

ncclDataType_t nccl_type(ElemType t) {
  switch (t) {
    case ElemType::kF32: return ncclFloat32;
    case ElemType::kF16: return ncclFloat16;
    case ElemType::kBF16: return ncclBfloat16;
    case ElemType::kF64: return ncclFloat64;
    default: return ncclNumTypes;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kAvg: return ncclAvg;
    default: return ncclNumOps;
  }
}

int no_nccl() { return kResultSystemError; }

// Polls an event up to kWaitLimit instead of blocking forever in cudaEventSynchronize.
int wait_event(cudaEvent_t event, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  for (;;) {
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return kResultSuccess;
    if (e != cudaErrorNotReady) return cuda_fail(e, what);
    if (std::chrono::steady_clock::now() > deadline) {
      SIEVE_WARN("collective proxy: %s did not complete within %lld s (a peer stuck in a collective?)", what,
                 (long long)std::chrono::duration_cast<std::chrono::seconds>(kWaitLimit).count());
      return kResultSystemError;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
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

struct CudaPlan : DevicePlan {
  ~CudaPlan() override {
    free_device(indices);
    free_device(range_src);
    free_device(range_dst);
    free_device(keep_bits);
    free_device(buffer);
    free_device(violations);
  }
  uint64_t count() const override { return layout.count; }
  uint64_t nnz() const override { return layout.nnz; }
  bool with_check() const override { return keep_bits != nullptr; }
  void* compact() override { return buffer; }
  void* flag() { return static_cast<char*>(buffer) + layout.nnz * esize; }

  kernels::DeviceLayout layout;
  size_t esize = 0;
  uint32_t* indices = nullptr;
  uint64_t* range_src = nullptr;
  uint64_t* range_dst = nullptr;
  uint32_t* keep_bits = nullptr;
  void* buffer = nullptr;
  unsigned long long* violations = nullptr;
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

}  // namespace

int CudaBackend::all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                            Stream stream) {
  const RealNccl& real = real_nccl();
  if (!real.all_reduce) return no_nccl();
  if (nccl_type(type) == ncclNumTypes || nccl_op(op) == ncclNumOps) return kResultInvalidArgument;
  return real.all_reduce(send, recv, size_t(count), nccl_type(type), nccl_op(op),
                         static_cast<ncclComm_t>(const_cast<void*>(comm)), as_stream(stream));
}

int CudaBackend::group_start() {
  const RealNccl& real = real_nccl();
  return real.group_start ? int(real.group_start()) : no_nccl();
}

int CudaBackend::group_end() {
  const RealNccl& real = real_nccl();
  return real.group_end ? int(real.group_end()) : no_nccl();
}

bool CudaBackend::capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(as_stream(stream), &status);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the answer "capturing" makes the caller run dense, always safe
    // A driver older than this build's CUDA runtime, or no device: say so once, not per call.
    static std::atomic<bool> warned{false};
    if (e != cudaErrorStreamCaptureImplicit && !warned.exchange(true))
      SIEVE_WARN("collective proxy: CUDA is unusable here (%s); every all-reduce passes through dense",
                 cudaGetErrorString(e));
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

int CudaBackend::agree(Comm comm, Stream stream, uint64_t hash, bool* all_equal) {
  const RealNccl& real = real_nccl();
  if (!real.all_reduce) return no_nccl();
  // max(h) == h and max(~h) == ~h on a rank iff no rank passed a different h: every rank learns it.
  uint64_t* host = nullptr;
  uint64_t* device = nullptr;
  cudaEvent_t done = nullptr;
  int rc = cuda_fail(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * sizeof(uint64_t), cudaHostAllocDefault), "agree");
  if (!rc) rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&device), 2 * sizeof(uint64_t)), "agree");
  if (!rc) rc = cuda_fail(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "agree");
  if (!rc) {
    host[0] = hash;
    host[1] = ~hash;
    rc = cuda_fail(cudaMemcpyAsync(device, host, 2 * sizeof(uint64_t), cudaMemcpyHostToDevice, as_stream(stream)), "agree");
  }
  if (!rc)
    rc = real.all_reduce(device, device, 2, ncclUint64, ncclMax, static_cast<ncclComm_t>(const_cast<void*>(comm)),
                         as_stream(stream));
  if (!rc) rc = cuda_fail(cudaMemcpyAsync(host, device, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost, as_stream(stream)), "agree");
  if (!rc) rc = cuda_fail(cudaEventRecord(done, as_stream(stream)), "agree");
  if (!rc) rc = wait_event(done, "the mask hash exchange");
  if (!rc) *all_equal = host[0] == hash && host[1] == ~hash;
  if (done) cudaEventDestroy(done);
  if (device) cudaFree(device);
  if (host) cudaFreeHost(host);
  return rc;
}

int CudaBackend::create_plan(const compress::Mask& mask, ElemType type, bool with_check,
                             std::unique_ptr<DevicePlan>* out) {
  auto plan = std::make_unique<CudaPlan>();
  plan->esize = element_size(type);
  kernels::DeviceLayout& l = plan->layout;
  l.count = mask.count();
  l.nnz = mask.kept();
  compress::MaskLayout layout = mask.layout();
  if (layout.kind == compress::MaskLayout::Kind::kIndices && mask.count() <= (uint64_t(1) << 32)) {
    std::vector<uint32_t> indices(layout.indices.begin(), layout.indices.end());
    if (int rc = upload(indices, &plan->indices, "plan upload")) return rc;
    l.kind = kernels::DeviceLayout::Kind::kIndices;
    l.indices = plan->indices;
  } else {
    std::vector<compress::Range> runs = layout.kind == compress::MaskLayout::Kind::kRanges ? layout.ranges : mask.runs();
    std::vector<uint64_t> src, dst{0};
    for (const compress::Range& r : runs) {
      if (r.length == 0) continue;  // the kernels rely on every run holding an element
      src.push_back(r.start);
      dst.push_back(dst.back() + r.length);
    }
    if (int rc = upload(src, &plan->range_src, "plan upload")) return rc;
    if (int rc = upload(dst, &plan->range_dst, "plan upload")) return rc;
    l.kind = kernels::DeviceLayout::Kind::kRanges;
    l.range_src = plan->range_src;
    l.range_dst = plan->range_dst;
    l.nranges = src.size();
  }
  if (with_check) {
    // The mask's 64-bit little-endian words read as 32-bit words are the kernel's bitmap.
    const std::vector<uint64_t>& words = mask.words();
    std::vector<uint32_t> bits(words.size() * 2);
    for (size_t i = 0; i < words.size(); ++i) {
      bits[2 * i] = uint32_t(words[i]);
      bits[2 * i + 1] = uint32_t(words[i] >> 32);
    }
    if (bits.empty()) bits.push_back(0);
    if (int rc = upload(bits, &plan->keep_bits, "plan upload")) return rc;
    l.keep_bits = plan->keep_bits;
    if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&plan->violations), sizeof(unsigned long long)),
                           "plan allocation"))
      return rc;
  }
  if (int rc = cuda_fail(cudaMalloc(&plan->buffer, (l.nnz + 1) * plan->esize), "compact buffer allocation")) return rc;
  *out = std::move(plan);
  return kResultSuccess;
}

int CudaBackend::gather(DevicePlan& plan, const void* src, Stream stream) {
  auto& p = static_cast<CudaPlan&>(plan);
  return cuda_fail(kernels::gather(p.layout, p.esize, src, p.buffer, stream), "gather kernel");
}

int CudaBackend::scatter(DevicePlan& plan, void* dst, Stream stream) {
  auto& p = static_cast<CudaPlan&>(plan);
  return cuda_fail(kernels::scatter(p.layout, p.esize, p.buffer, dst, stream), "scatter kernel");
}

int CudaBackend::check(DevicePlan& plan, const void* src, const FlagEncoding& encoding, Stream stream) {
  auto& p = static_cast<CudaPlan&>(plan);
  if (!p.with_check()) return kResultInternalError;
  return cuda_fail(kernels::check_pruned(p.layout, p.esize, src, p.flag(), encoding.ok_bits, encoding.bad_bits,
                                         p.violations, stream),
                   "mask check kernel");
}

int CudaBackend::create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) {
  auto slot = std::make_unique<CudaSlot>();
  slot->words32 = (count + 31) / 32;
  const size_t host_bytes = 2 * sizeof(uint64_t) + slot->words32 * sizeof(uint32_t);
  if (int rc = cuda_fail(cudaHostAlloc(reinterpret_cast<void**>(&slot->host), host_bytes, cudaHostAllocDefault),
                         "record allocation"))
    return rc;
  if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&slot->device_bits), slot->words32 * sizeof(uint32_t)),
                         "record allocation"))
    return rc;
  if (int rc = cuda_fail(cudaMalloc(reinterpret_cast<void**>(&slot->device_flag), sizeof(uint64_t)), "record allocation"))
    return rc;
  if (int rc = cuda_fail(cudaEventCreateWithFlags(&slot->event, cudaEventDisableTiming), "record allocation")) return rc;
  *out = std::move(slot);
  return kResultSuccess;
}

int CudaBackend::record_nonzero(LagSlot& slot, const void* buf, uint64_t count, ElemType type, Stream stream) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = cuda_fail(kernels::nonzero_bitmap(element_size(type), buf, count, s.device_bits, stream), "nonzero kernel"))
    return rc;
  if (int rc = cuda_fail(cudaMemcpyAsync(s.host + 2, s.device_bits, s.words32 * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                         as_stream(stream)),
                         "record copy"))
    return rc;
  return cuda_fail(cudaEventRecord(s.event, as_stream(stream)), "record event");
}

int CudaBackend::record_flag(LagSlot& slot, DevicePlan& plan, Stream stream) {
  auto& s = static_cast<CudaSlot&>(slot);
  auto& p = static_cast<CudaPlan&>(plan);
  if (int rc = cuda_fail(kernels::copy_element(p.esize, p.flag(), s.device_flag, stream), "flag copy")) return rc;
  if (int rc = cuda_fail(cudaMemcpyAsync(s.host, s.device_flag, sizeof(uint64_t), cudaMemcpyDeviceToHost, as_stream(stream)),
                         "record copy"))
    return rc;
  if (int rc = cuda_fail(cudaMemcpyAsync(s.host + 1, p.violations, sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                         as_stream(stream)),
                         "record copy"))
    return rc;
  return cuda_fail(cudaEventRecord(s.event, as_stream(stream)), "record event");
}

int CudaBackend::read_nonzero(LagSlot& slot, uint64_t count, compress::Mask* nonzero) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = wait_event(s.event, "a learned-mask record")) return rc;
  *nonzero = compress::Mask::from_bitmap(reinterpret_cast<const uint8_t*>(s.host + 2), count);
  return kResultSuccess;
}

int CudaBackend::read_flag(LagSlot& slot, uint64_t* flag_bits, uint64_t* local_violations) {
  auto& s = static_cast<CudaSlot&>(slot);
  if (int rc = wait_event(s.event, "a learned-mask flag")) return rc;
  *flag_bits = s.host[0];
  *local_violations = s.host[1];
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy
