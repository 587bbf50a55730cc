// SPDX-License-Identifier: Apache-2.0
// CUDA kernels behind gather_scatter.h. Templated on the element's storage type (uint16/32/64): the
// kernels copy bits, so one instantiation serves f16 and bf16, another f32.
//
// Gather and scatter walk the layout tile by tile (compress/tile_layout.h): a block takes a tile of
// kTileElements, 256 elements (one per thread) at a time. Each warp ballots which of its 32
// elements are kept; a lane's compact position is the tile's base, plus the kept elements of the
// earlier warps of this round (a shared-memory prefix over 8 warp counts), plus the kept lanes
// before it in its warp (popc of the ballot under its lane mask). Reads and writes of consecutive
// kept elements stay consecutive, and no per-element index is stored or loaded.
#include "compress/cuda/gather_scatter.h"

#include <cuda_runtime.h>

#include "compress/tile_layout.h"

namespace sieve::compress::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr uint64_t kTile = compress::kTileElements;
static_assert(kTile % kThreads == 0, "a tile is whole rounds of one element per thread");
constexpr uint64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

unsigned blocks_for(uint64_t n, uint64_t per_block) {
  const uint64_t b = (n + per_block - 1) / per_block;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

template <typename T> __device__ __forceinline__ bool is_nonzero(T v) {
  constexpr T kSign = T(T(1) << (sizeof(T) * 8 - 1));
  return (v & T(~kSign)) != 0;
}

__device__ __forceinline__ bool kept_at(const DeviceLayout& l, uint64_t i) {
  return i < l.count && ((l.bits[i >> 5] >> (i & 31)) & 1u);
}

// kGather: compact[pos] = data[i] for kept i. Otherwise (scatter): data[i] = kept ? compact[pos] : 0.
template <typename T, bool kGather> __global__ void __launch_bounds__(kThreads)
    tile_kernel(DeviceLayout l, const T* __restrict__ in, T* __restrict__ out) {
  __shared__ unsigned s_counts[kWarps];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned below = (1u << lane) - 1u;
  const uint64_t tiles = (l.count + kTile - 1) / kTile;
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint64_t base = l.tile_base[tile];
    for (uint64_t round = 0; round < kTile / kThreads; ++round) {
      const uint64_t i = tile * kTile + round * kThreads + threadIdx.x;
      if (tile * kTile + round * kThreads >= l.count) break;  // the same for every thread of the block
      const bool kept = kept_at(l, i);
      const unsigned ballot = __ballot_sync(0xffffffffu, kept);
      if (lane == 0) s_counts[warp] = unsigned(__popc(ballot));
      __syncthreads();
      unsigned before = 0, total = 0;
      for (int w = 0; w < kWarps; ++w) {
        before += w < int(warp) ? s_counts[w] : 0u;
        total += s_counts[w];
      }
      const uint64_t pos = base + before + unsigned(__popc(ballot & below));
      if (kGather) {
        if (kept) out[pos] = in[i];
      } else if (i < l.count) {
        out[i] = kept ? in[pos] : T(0);
      }
      base += total;
      __syncthreads();  // s_counts is rewritten by the next round
    }
  }
}

template <typename T> __global__ void init_flag_kernel(T* flag, T ok, unsigned long long* violations) {
  *flag = ok;
  *violations = 0;
}

template <typename T> __global__ void check_kernel(DeviceLayout l, const T* __restrict__ src, T* flag, T bad,
                                                   unsigned long long* violations) {
  const uint64_t total = (l.count + 31) / 32 * 32, stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const bool violation = i < l.count && !kept_at(l, i) && is_nonzero(src[i]);
    const unsigned ballot = __ballot_sync(0xffffffffu, violation);
    if (ballot && (threadIdx.x & 31) == 0) {  // one atomic per warp, not per element
      atomicAdd(violations, (unsigned long long)__popc(ballot));
      *flag = bad;  // every writer stores the same value
    }
  }
}

template <typename T>
__global__ void count_kernel(DeviceLayout l, const T* __restrict__ src, unsigned long long* total) {
  const uint64_t all = (l.count + 31) / 32 * 32, stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < all; i += stride) {
    const unsigned ballot = __ballot_sync(0xffffffffu, i < l.count && !kept_at(l, i) && is_nonzero(src[i]));
    if (ballot && (threadIdx.x & 31) == 0) atomicAdd(total, (unsigned long long)__popc(ballot));
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

template <typename T, bool kGather> int tiles(const DeviceLayout& l, const void* in, void* out, cudaStream_t s) {
  if (l.count == 0 || (kGather && l.nnz == 0)) return cudaSuccess;
  tile_kernel<T, kGather>
      <<<blocks_for(l.count, kTile), kThreads, 0, s>>>(l, static_cast<const T*>(in), static_cast<T*>(out));
  return cudaGetLastError();
}

template <typename T> int check_as(const DeviceLayout& l, const void* src, void* flag, uint64_t ok, uint64_t bad,
                                   unsigned long long* v, cudaStream_t s) {
  init_flag_kernel<T><<<1, 1, 0, s>>>(static_cast<T*>(flag), T(ok), v);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (l.count == 0) return cudaSuccess;
  check_kernel<T><<<blocks_for(l.count, kThreads), kThreads, 0, s>>>(l, static_cast<const T*>(src),
                                                                     static_cast<T*>(flag), T(bad), v);
  return cudaGetLastError();
}

// Calls body(T{}) with the storage type of element_size.
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
  return by_size(element_size,
                 [&](auto t) { return tiles<decltype(t), true>(layout, src, compact, as_stream(stream)); });
}

int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst, void* stream) {
  return by_size(element_size,
                 [&](auto t) { return tiles<decltype(t), false>(layout, compact, dst, as_stream(stream)); });
}

int check_pruned(const DeviceLayout& layout, size_t element_size, const void* src, void* flag, uint64_t ok_bits,
                 uint64_t bad_bits, unsigned long long* violations, void* stream) {
  return by_size(element_size, [&](auto t) {
    return check_as<decltype(t)>(layout, src, flag, ok_bits, bad_bits, violations, as_stream(stream));
  });
}

int count_pruned(const DeviceLayout& layout, size_t element_size, const void* src, unsigned long long* total,
                 void* stream) {
  return by_size(element_size, [&](auto t) {
    using T = decltype(t);
    if (layout.count == 0 || layout.nnz == layout.count) return int(cudaSuccess);
    count_kernel<T><<<blocks_for(layout.count, kThreads), kThreads, 0, as_stream(stream)>>>(
        layout, static_cast<const T*>(src), total);
    return int(cudaGetLastError());
  });
}

int nonzero_bitmap(size_t element_size, const void* src, uint64_t count, uint32_t* bits, void* stream) {
  return by_size(element_size, [&](auto t) {
    using T = decltype(t);
    if (count == 0) return int(cudaSuccess);
    bitmap_kernel<T>
        <<<blocks_for(count, kThreads), kThreads, 0, as_stream(stream)>>>(static_cast<const T*>(src), count, bits);
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
