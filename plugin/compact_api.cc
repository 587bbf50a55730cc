// SPDX-License-Identifier: Apache-2.0
// sieve_capabilities() and sieve_compact_gather/scatter (sieve.h): the collective proxy's gather and
// scatter kernels (compress/cuda) offered to callers that compact their own buffers. Compiled into the
// library in every build; SIEVE_COMPACT_CUDA (set where CUDA is found) decides whether the kernels are
// behind it or every call answers SIEVE_ERR_UNAVAILABLE. sieve_compact_gather_host/scatter_host are
// compress/compact_host.h's CPU kernels, in every build.
#include <cstdint>
#include <string>

#include "compress/compact_host.h"
#include "compress/tile_layout.h"
#include "plugin/sieve.h"
#include "plugin/sieve_api.h"
#if SIEVE_COMPACT_CUDA
#include "compress/cuda/gather_scatter.h"
#endif

namespace {

// The checks both directions share; 0 or the failure's code.
int check(const char* function, const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
          size_t element_size, const void* in, const void* out) {
  using sieve::plugin::record_failure;
#if !SIEVE_COMPACT_CUDA
  (void)bits, (void)tile_base, (void)count, (void)nnz, (void)element_size, (void)in, (void)out;
  return record_failure(SIEVE_ERR_UNAVAILABLE, std::string(function) +
                                                   ": this library was built without CUDA (sieve_capabilities() "
                                                   "has no SIEVE_CAP_CUDA_COMPACT)");
#else
  if (!bits || !tile_base || !in || !out)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": a device pointer is NULL");
  if (count == 0) return record_failure(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": count is 0");
  if (nnz > count)
    return record_failure(SIEVE_ERR_RANGE, std::string(function) + ": nnz " + std::to_string(nnz) +
                                               " is more than count " + std::to_string(count));
  if (element_size != 2 && element_size != 4 && element_size != 8)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": element_size " +
                                                          std::to_string(element_size) + " is not 2, 4 or 8");
  return SIEVE_OK;
#endif
}

// The host calls' checks; 0 or the failure's code.
int check_host(const char* function, const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
               size_t element_size, uint64_t first, uint64_t span, const void* buffer, const void* compact,
               int threads) {
  using sieve::plugin::record_failure;
  const std::string fn(function);
  if (element_size != 2 && element_size != 4 && element_size != 8)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT,
                          fn + ": element_size " + std::to_string(element_size) + " is not 2, 4 or 8");
  if (threads < 1)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT, fn + ": threads " + std::to_string(threads) + " is below 1");
  if (first > count || span > count - first)
    return record_failure(SIEVE_ERR_RANGE, fn + ": elements [" + std::to_string(first) + ", +" + std::to_string(span) +
                                               ") pass count " + std::to_string(count));
  if (nnz > count)
    return record_failure(SIEVE_ERR_RANGE,
                          fn + ": nnz " + std::to_string(nnz) + " is more than count " + std::to_string(count));
  if (count > UINTPTR_MAX / element_size)
    return record_failure(SIEVE_ERR_RANGE, fn + ": count " + std::to_string(count) + " does not fit in memory");
  if (span == 0) return SIEVE_OK;
  if (!bits || !tile_base || !buffer || !compact)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT, fn + ": a pointer is NULL");
  const uint64_t tiles = count / sieve::compress::kTileElements + (count % sieve::compress::kTileElements != 0);
  if (tile_base[tiles] != nnz)
    return record_failure(
        SIEVE_ERR_INVALID_ARGUMENT,
        fn + ": tile_base's last entry is " + std::to_string(tile_base[tiles]) + ", not nnz " + std::to_string(nnz));
  const sieve::compress::CompactMask mask{bits, tile_base, count};
  const uint64_t compact_bytes =
      (sieve::compress::kept_before(mask, first + span) - sieve::compress::kept_before(mask, first)) * element_size;
  // Only the two in-place forms may overlap: anything else would read what it has already written.
  const auto at = reinterpret_cast<uintptr_t>(buffer), c = reinterpret_cast<uintptr_t>(compact);
  const bool overlaps = c < at + count * element_size && at < c + compact_bytes;
  if (overlaps && c != at + first * element_size)
    return record_failure(SIEVE_ERR_INVALID_ARGUMENT,
                          fn + ": compact overlaps the buffer other than at element first (in place)");
  return SIEVE_OK;
}

sieve::compress::HostCompactOptions host_options(int threads) {
  sieve::compress::HostCompactOptions options;
  options.threads = unsigned(threads);
  return options;
}

#if SIEVE_COMPACT_CUDA
int launched(const char* function, int cuda_error) {
  if (cuda_error == 0) return SIEVE_OK;
  return sieve::plugin::record_failure(SIEVE_ERR_INTERNAL,
                                       std::string(function) + ": CUDA error " + std::to_string(cuda_error));
}

sieve::compress::cuda::DeviceLayout layout_of(const uint32_t* bits, const uint64_t* tile_base, uint64_t count,
                                              uint64_t nnz) {
  sieve::compress::cuda::DeviceLayout layout;
  layout.count = count;
  layout.nnz = nnz;
  layout.bits = bits;
  layout.tile_base = tile_base;
  return layout;
}
#endif

}  // namespace

uint32_t sieve_capabilities(void) {
  return (SIEVE_COMPACT_CUDA ? uint32_t(SIEVE_CAP_CUDA_COMPACT) : 0u) | uint32_t(SIEVE_CAP_HOST_COMPACT) |
         (SIEVE_PROXY_INTERPOSED ? uint32_t(SIEVE_CAP_PROXY) : 0u) |
         (SIEVE_HAVE_VERBS ? uint32_t(SIEVE_CAP_VERBS) : 0u);
}

uint64_t sieve_compact_tile_elements(void) { return sieve::compress::kTileElements; }

int sieve_compact_gather(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                         size_t element_size, const void* src, void* compact, void* stream) {
  static const char* const kFn = "sieve_compact_gather";
  if (int rc = check(kFn, bits, tile_base, count, nnz, element_size, src, compact)) return rc;
#if SIEVE_COMPACT_CUDA
  return launched(
      kFn, sieve::compress::cuda::gather(layout_of(bits, tile_base, count, nnz), element_size, src, compact, stream));
#else
  (void)stream;
  return SIEVE_ERR_UNAVAILABLE;
#endif
}

int sieve_compact_scatter(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                          size_t element_size, const void* compact, void* dst, void* stream) {
  static const char* const kFn = "sieve_compact_scatter";
  if (int rc = check(kFn, bits, tile_base, count, nnz, element_size, compact, dst)) return rc;
#if SIEVE_COMPACT_CUDA
  return launched(
      kFn, sieve::compress::cuda::scatter(layout_of(bits, tile_base, count, nnz), element_size, compact, dst, stream));
#else
  (void)stream;
  return SIEVE_ERR_UNAVAILABLE;
#endif
}

int sieve_compact_gather_host(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                              size_t element_size, uint64_t first, uint64_t span, const void* src, void* compact,
                              int threads) {
  if (int rc = check_host("sieve_compact_gather_host", bits, tile_base, count, nnz, element_size, first, span, src,
                          compact, threads))
    return rc;
  if (span == 0) return SIEVE_OK;
  sieve::compress::gather_host({bits, tile_base, count}, first, span, element_size, src, compact,
                               host_options(threads));
  return SIEVE_OK;
}

int sieve_compact_scatter_host(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                               size_t element_size, uint64_t first, uint64_t span, const void* compact, void* dst,
                               int threads) {
  if (int rc = check_host("sieve_compact_scatter_host", bits, tile_base, count, nnz, element_size, first, span, dst,
                          compact, threads))
    return rc;
  if (span == 0) return SIEVE_OK;
  sieve::compress::scatter_host({bits, tile_base, count}, first, span, element_size, compact, dst,
                                host_options(threads));
  return SIEVE_OK;
}
