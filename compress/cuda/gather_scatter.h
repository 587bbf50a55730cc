// SPDX-License-Identifier: Apache-2.0
// Host-side entry points of the CUDA kernels of the collective proxy. Plain C++ (no CUDA types) so
// plugin/proxy's CUDA backend and the GPU tests call them without CUDA headers. Every function
// enqueues work on `stream` (a cudaStream_t) and returns the launch's cudaError_t as an int (0 =
// success); none synchronises, allocates or copies from pageable memory, so all are legal during
// CUDA graph capture.
// Kernels move bits, not numbers: they only need the element size (2, 4 or 8 bytes), and "nonzero"
// means any bit other than the sign bit set, so -0.0 (what a pruned gradient holds) counts as zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress::cuda {

// Device copy of a compress::TileLayout (device pointers).
struct DeviceLayout {
  uint64_t count = 0;                   // elements spanned
  uint64_t nnz = 0;                     // kept elements
  const uint32_t* bits = nullptr;       // bit i = element i kept
  const uint64_t* tile_base = nullptr;  // kept elements before each tile of compress::kTileElements
};

// compact[j] = the j-th kept element of src, j < nnz. One pass, warp-ballot positions.
int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact, void* stream);
// dst[i] = the kept element's value from compact, exact zero elsewhere: every element written once
// (no memset first). dst may be the gather's src.
int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst, void* stream);
// Violation check for learned masks: *flag (one element) = ok_bits and *violations = 0, then every
// nonzero element of src that the layout prunes adds one to *violations (one atomic per warp) and
// sets *flag = bad_bits.
int check_pruned(const DeviceLayout& layout, size_t element_size, const void* src, void* flag, uint64_t ok_bits,
                 uint64_t bad_bits, unsigned long long* violations, void* stream);
// Published masks' honesty: adds to *total (device memory, never reset here) the nonzero elements of
// src that the layout prunes (one atomic per warp). Nothing else is written.
int count_pruned(const DeviceLayout& layout, size_t element_size, const void* src, unsigned long long* total,
                 void* stream);
// bits[w] bit b = element 32 w + b of src is nonzero; ceil(count / 32) words (little-endian words
// read as bytes give the C API's LSB-first bitmap).
int nonzero_bitmap(size_t element_size, const void* src, uint64_t count, uint32_t* bits, void* stream);
// Copies one element's bits (element_size bytes) to a small device record (zero-extended to 64 bits).
int copy_element(size_t element_size, const void* src, uint64_t* dst_bits, void* stream);

}  // namespace sieve::compress::cuda
