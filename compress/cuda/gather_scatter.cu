// CUDA gather/scatter kernels behind gather_scatter.h. Templated on the element's storage type
// (uint16/32/64): the kernels copy bits, so one instantiation serves f16 and bf16, another f32.
#include "compress/cuda/gather_scatter.h"

#include <cuda_runtime.h>

namespace sieve::compress::cuda {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

unsigned blocks_for(uint64_t n) {
  const uint64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

template <typename T> __device__ __forceinline__ bool is_nonzero(T v) {
  constexpr T kSign = T(T(1) << (sizeof(T) * 8 - 1));
  return (v & T(~kSign)) != 0;
}

// The kept run holding compact position j: the last r with range_dst[r] <= j.
__device__ __forceinline__ uint64_t find_range(const uint64_t* range_dst, uint64_t nranges, uint64_t j) {
  uint64_t lo = 0, hi = nranges;  // invariant: range_dst[lo] <= j < range_dst[hi]
  while (hi - lo > 1) {
    const uint64_t mid = (lo + hi) / 2;
    if (range_dst[mid] <= j) lo = mid; else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ uint64_t source_index(const DeviceLayout& l, uint64_t j) {
  if (l.kind == DeviceLayout::Kind::kIndices) return l.indices[j];
  const uint64_t r = find_range(l.range_dst, l.nranges, j);
  return l.range_src[r] + (j - l.range_dst[r]);
}

// Ranges layout: a per-element binary search over all runs would be a chain of dependent global
// loads per element. Instead each block takes a tile of compact positions, finds the runs that tile
// touches (at most one per position, since runs are never empty), stages them in shared memory and
// searches there. Gather (kGather) reads the runs and writes the tile; scatter the reverse.
constexpr int kItems = 4;
constexpr int kTile = kThreads * kItems;

template <typename T, bool kGather>
__global__ void __launch_bounds__(kThreads) ranges_kernel(DeviceLayout l, const T* __restrict__ in, T* __restrict__ out) {
  __shared__ uint64_t s_src[kTile];
  __shared__ uint64_t s_dst[kTile];
  __shared__ uint64_t s_first, s_n;
  const uint64_t step = uint64_t(gridDim.x) * kTile;
  for (uint64_t tile = uint64_t(blockIdx.x) * kTile; tile < l.nnz; tile += step) {
    const uint64_t last = (tile + kTile < l.nnz ? tile + kTile : l.nnz) - 1;
    if (threadIdx.x == 0) {
      const uint64_t first = find_range(l.range_dst, l.nranges, tile);
      s_first = first;
      s_n = find_range(l.range_dst, l.nranges, last) - first + 1;
    }
    __syncthreads();
    const uint64_t first = s_first, n = s_n;
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
      s_src[i] = l.range_src[first + i];
      s_dst[i] = l.range_dst[first + i];
    }
    __syncthreads();
    for (uint64_t j = tile + threadIdx.x; j <= last; j += blockDim.x) {
      uint64_t lo = 0, hi = n;  // the last lo < n with s_dst[lo] <= j
      while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        if (s_dst[mid] <= j) lo = mid; else hi = mid;
      }
      const uint64_t element = s_src[lo] + (j - s_dst[lo]);
      if (kGather) out[j] = in[element]; else out[element] = in[j];
    }
    __syncthreads();  // the next tile overwrites the shared runs
  }
}

unsigned tiles_for(uint64_t nnz) {
  const uint64_t t = (nnz + kTile - 1) / kTile;
  return unsigned(t < 1 ? 1 : (t > kMaxBlocks ? kMaxBlocks : t));
}

template <typename T> __global__ void gather_kernel(DeviceLayout l, const T* __restrict__ src, T* __restrict__ compact) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t j = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < l.nnz; j += stride)
    compact[j] = src[source_index(l, j)];
}

template <typename T> __global__ void scatter_kernel(DeviceLayout l, const T* __restrict__ compact, T* __restrict__ dst) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t j = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < l.nnz; j += stride)
    dst[source_index(l, j)] = compact[j];
}

template <typename T> __global__ void init_flag_kernel(T* flag, T ok, unsigned long long* violations) {
  *flag = ok;
  *violations = 0;
}

template <typename T>
__global__ void check_kernel(DeviceLayout l, const T* __restrict__ src, T* flag, T bad, unsigned long long* violations) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < l.count; i += stride) {
    const bool kept = (l.keep_bits[i >> 5] >> (i & 31)) & 1u;
    if (!kept && is_nonzero(src[i])) {
      atomicAdd(violations, 1ull);
      *flag = bad;  // every writer stores the same value
    }
  }
}

// One thread per element, one warp per 32-bit word (a ballot), so reads stay coalesced. The loop
// runs to a multiple of 32 with a stride that is one too, so the lanes of a warp always vote together.
template <typename T> __global__ void bitmap_kernel(const T* __restrict__ src, uint64_t count, uint32_t* bits) {
  const uint64_t total = (count + 31) / 32 * 32, stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const unsigned word = __ballot_sync(0xffffffffu, i < count && is_nonzero(src[i]));
    if ((threadIdx.x & 31) == 0) bits[i >> 5] = word;
  }
}

template <typename T> __global__ void copy_element_kernel(const T* src, uint64_t* dst) { *dst = uint64_t(*src); }

template <typename T> int gather_as(const DeviceLayout& l, const void* src, void* compact, cudaStream_t s) {
  if (l.nnz == 0) return cudaSuccess;
  if (l.kind == DeviceLayout::Kind::kRanges)
    ranges_kernel<T, true><<<tiles_for(l.nnz), kThreads, 0, s>>>(l, static_cast<const T*>(src), static_cast<T*>(compact));
  else
    gather_kernel<T><<<blocks_for(l.nnz), kThreads, 0, s>>>(l, static_cast<const T*>(src), static_cast<T*>(compact));
  return cudaGetLastError();
}

template <typename T> int scatter_as(const DeviceLayout& l, const void* compact, void* dst, cudaStream_t s) {
  cudaError_t e = cudaMemsetAsync(dst, 0, l.count * sizeof(T), s);
  if (e != cudaSuccess || l.nnz == 0) return e;
  if (l.kind == DeviceLayout::Kind::kRanges)
    ranges_kernel<T, false><<<tiles_for(l.nnz), kThreads, 0, s>>>(l, static_cast<const T*>(compact), static_cast<T*>(dst));
  else
    scatter_kernel<T><<<blocks_for(l.nnz), kThreads, 0, s>>>(l, static_cast<const T*>(compact), static_cast<T*>(dst));
  return cudaGetLastError();
}

template <typename T>
int check_as(const DeviceLayout& l, const void* src, void* flag, uint64_t ok, uint64_t bad, unsigned long long* v,
             cudaStream_t s) {
  init_flag_kernel<T><<<1, 1, 0, s>>>(static_cast<T*>(flag), T(ok), v);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  check_kernel<T><<<blocks_for(l.count), kThreads, 0, s>>>(l, static_cast<const T*>(src), static_cast<T*>(flag), T(bad), v);
  return cudaGetLastError();
}

// Calls body.template operator()<T>() with the storage type of element_size.
template <typename Body> int by_size(size_t element_size, Body&& body) {
  switch (element_size) {
    case 2: return body(uint16_t{});
    case 4: return body(uint32_t{});
    case 8: return body(uint64_t{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact, void* stream) {
  return by_size(element_size, [&](auto t) { return gather_as<decltype(t)>(layout, src, compact, as_stream(stream)); });
}

int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst, void* stream) {
  return by_size(element_size, [&](auto t) { return scatter_as<decltype(t)>(layout, compact, dst, as_stream(stream)); });
}

int check_pruned(const DeviceLayout& layout, size_t element_size, const void* src, void* flag, uint64_t ok_bits,
                 uint64_t bad_bits, unsigned long long* violations, void* stream) {
  if (!layout.keep_bits) return cudaErrorInvalidValue;
  return by_size(element_size, [&](auto t) {
    return check_as<decltype(t)>(layout, src, flag, ok_bits, bad_bits, violations, as_stream(stream));
  });
}

int nonzero_bitmap(size_t element_size, const void* src, uint64_t count, uint32_t* bits, void* stream) {
  return by_size(element_size, [&](auto t) {
    using T = decltype(t);
    bitmap_kernel<T><<<blocks_for(count), kThreads, 0, as_stream(stream)>>>(static_cast<const T*>(src), count, bits);
    return int(cudaGetLastError());
  });
}

int copy_element(size_t element_size, const void* src, uint64_t* dst_bits, void* stream) {
  return by_size(element_size, [&](auto t) {
    using T = decltype(t);
    copy_element_kernel<T><<<1, 1, 0, as_stream(stream)>>>(static_cast<const T*>(src), dst_bits);
    return int(cudaGetLastError());
  });
}

}  // namespace sieve::compress::cuda
