// Host-side entry points of the CUDA gather/scatter kernels that move a masked buffer's kept elements
// into a compact buffer and back. Plain C++ (no CUDA types) so plugin/proxy's CUDA backend and the
// GPU tests call them without including CUDA headers. Every function enqueues work on `stream` (a
// cudaStream_t) and returns the launch's cudaError_t as an int (0 = success); none synchronises,
// allocates or copies from pageable memory, so all are legal during CUDA graph capture.
// Kernels move bits, not numbers: they only need the element size (2, 4 or 8 bytes), and "nonzero"
// means any bit other than the sign bit set, so -0.0 (what a pruned gradient holds) counts as zero.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress::cuda {

// Device-resident description of the kept elements (device pointers; built by the proxy's backend).
struct DeviceLayout {
  enum class Kind { kRanges, kIndices };
  Kind kind = Kind::kRanges;
  uint64_t count = 0;                  // elements of the full buffer
  uint64_t nnz = 0;                    // kept elements = compact elements
  const uint32_t* indices = nullptr;   // kIndices: nnz ascending element indices
  const uint64_t* range_src = nullptr; // kRanges: first element of each kept run (runs never empty)
  const uint64_t* range_dst = nullptr; // kRanges: nranges + 1 prefix offsets into the compact buffer
  uint64_t nranges = 0;
  const uint32_t* keep_bits = nullptr; // optional: bitmap (bit i = element i kept), for check_pruned
};

// compact[j] = src[j-th kept element], j < nnz.
int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact, void* stream);
// dst = 0 everywhere, then dst[j-th kept element] = compact[j]. dst may be the gather's src.
int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst, void* stream);
// Violation check for learned masks: *flag (one element) = ok_bits, *violations = 0, then every
// element of src that the layout's keep_bits prune but is nonzero adds one to *violations and sets
// *flag = bad_bits. Needs layout.keep_bits.
int check_pruned(const DeviceLayout& layout, size_t element_size, const void* src, void* flag, uint64_t ok_bits,
                 uint64_t bad_bits, unsigned long long* violations, void* stream);
// bits[w] bit b = element 32 w + b of src is nonzero; ceil(count / 32) words (little-endian words
// read as bytes give the C API's LSB-first bitmap).
int nonzero_bitmap(size_t element_size, const void* src, uint64_t count, uint32_t* bits, void* stream);
// Copies one element's bits (element_size bytes) from src to a small host-visible or device record.
int copy_element(size_t element_size, const void* src, uint64_t* dst_bits, void* stream);

}  // namespace sieve::compress::cuda
