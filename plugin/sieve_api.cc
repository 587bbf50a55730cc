// SPDX-License-Identifier: Apache-2.0
// The C API of sieve.h. Every entry point catches everything: a C caller (or ctypes) gets a code
// and a message, never an exception.
#include "plugin/sieve.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "compress/safetensors.h"
#include "net/log.h"
#include "plugin/proxy_probe.h"
#include "plugin/sieve_api.h"
#include "plugin/stats.h"

namespace sieve::plugin {

static_assert(SIEVE_DTYPE_F32 == int(compress::DType::kF32) && SIEVE_DTYPE_F16 == int(compress::DType::kF16) &&
                  SIEVE_DTYPE_BF16 == int(compress::DType::kBF16) && SIEVE_DTYPE_F64 == int(compress::DType::kF64) &&
                  SIEVE_DTYPE_I8 == int(compress::DType::kI8) && SIEVE_DTYPE_U8 == int(compress::DType::kU8) &&
                  SIEVE_DTYPE_I32 == int(compress::DType::kI32) && SIEVE_DTYPE_I64 == int(compress::DType::kI64) &&
                  SIEVE_DTYPE_COUNT == compress::kDTypeCount,
              "sieve.h's dtype codes are compress::DType's values");

compress::MaskRegistry& mask_registry() {
  static compress::MaskRegistry registry;
  return registry;
}

namespace {

// Addresses as a debugger and /proc/PID/maps show them.
std::string hex_address(const void* p) {
  char text[2 + 16 + 1];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return text;
}

// No buffer a process can hold reaches past this: x86-64 and AArch64 user space ends at 2^47..2^52,
// CUDA's unified addresses inside it. Refusing larger ends turns a wild count into a clear error
// before anything is allocated or read.
constexpr uint64_t kAddressSpaceEnd = uint64_t(1) << 57;

thread_local std::string t_last_error;

int fail(int code, const std::string& detail) {
  t_last_error = detail;
  return code;
}

int code_of(const compress::Status& s) {
  switch (s.code()) {
    case compress::Code::kOk: return SIEVE_OK;
    case compress::Code::kInvalidArgument: return SIEVE_ERR_INVALID_ARGUMENT;
    case compress::Code::kOutOfRange: return SIEVE_ERR_RANGE;
    case compress::Code::kNotFound: return SIEVE_ERR_NOT_FOUND;
    case compress::Code::kMalformed: return SIEVE_ERR_MALFORMED;
    case compress::Code::kIo: return SIEVE_ERR_IO;
  }
  return SIEVE_ERR_INTERNAL;
}

int fail(const char* function, const compress::Status& s) {
  return fail(code_of(s), std::string(function) + ": " + s.message());
}

// A versioned struct whose size field is smaller than the field itself: older, shorter structs are
// accepted, so this is the one size no header explains.
int size_too_small(const char* function, const char* field, size_t size, const char* type) {
  return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": " + field + " is " + std::to_string(size) +
                                              ": set it to sizeof(" + type +
                                              ") (an older, shorter struct is accepted, not one shorter than its "
                                              "size field)");
}

// Runs body, turning any escaping exception into a code.
template <typename Body> int guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(SIEVE_ERR_NO_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::length_error&) {
    return fail(SIEVE_ERR_NO_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(SIEVE_ERR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) { return fail(SIEVE_ERR_INTERNAL, std::string(function) + ": unexpected failure"); }
}

// The checks every publish shares, made before anything is sized from the caller's count.
int check_buffer(const char* function, const void* base, size_t count, int dtype, compress::DType* out) {
  if (!base) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": base is NULL");
  if (count == 0) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": count is 0");
  if (dtype < 0 || dtype >= SIEVE_DTYPE_COUNT)
    return fail(SIEVE_ERR_UNKNOWN_DTYPE, std::string(function) + ": unknown dtype " + std::to_string(dtype));
  *out = compress::DType(dtype);
  uint64_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(uint64_t(count), uint64_t(compress::dtype_size(*out)), &bytes) ||
      __builtin_add_overflow(uint64_t(reinterpret_cast<uintptr_t>(base)), bytes, &end) || end > kAddressSpaceEnd)
    return fail(SIEVE_ERR_RANGE, std::string(function) + ": " + std::to_string(count) + " " +
                                     compress::dtype_name(*out) + " elements at " + hex_address(base) +
                                     " do not fit in the address space");
  return SIEVE_OK;
}

// Flags and the result struct's size, as every commit entry point checks them.
int check_commit(const char* function, uint32_t flags, const sieve_commit_result_t* result) {
  if (flags & ~uint32_t(SIEVE_COMMIT_UNION))
    return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": unknown flags " + std::to_string(flags) +
                                                " (the only flag is SIEVE_COMMIT_UNION = 1)");
  if (result && result->size < sizeof(result->size))
    return size_too_small(function, "result->size", result->size, "sieve_commit_result_t");
  return SIEVE_OK;
}

// A mask that keeps nothing is valid (a layer pruned away) but far more often an inverted or empty one,
// and it silently zeroes every element it covers: said once per publish, as a warning.
void warn_if_keeps_nothing(const char* function, const compress::Mask& mask) {
  if (mask.count() > 0 && mask.kept() == 0)
    SIEVE_WARN(
        "%s: the mask keeps none of its %llu elements: once committed, every one of them is sent as zero "
        "(an inverted or empty mask?)",
        function, static_cast<unsigned long long>(mask.count()));
}

int publish(const char* function, const void* base, compress::DType dtype, compress::Mask&& mask, uint64_t* mask_id,
            const void* comm = nullptr) {
  warn_if_keeps_nothing(function, mask);
  uint64_t id = 0;
  compress::Status s = mask_registry().publish(base, dtype, std::make_shared<const compress::Mask>(std::move(mask)),
                                               &id, uint64_t(reinterpret_cast<uintptr_t>(comm)));
  if (!s.ok()) return fail(function, s);
  if (mask_id) *mask_id = id;
  return SIEVE_OK;
}

// A bits array given with its length: shorter than the mask needs is refused, never read past.
int check_bits(const char* function, const uint8_t* bits, size_t bits_bytes, size_t count) {
  if (!bits) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": bits is NULL");
  if (bits_bytes < count / 8 + (count % 8 != 0))
    return fail(SIEVE_ERR_RANGE, std::string(function) + ": " + std::to_string(count) + " elements need " +
                                     std::to_string(count / 8 + (count % 8 != 0)) + " bytes of bits, " +
                                     std::to_string(bits_bytes) + " given");
  return SIEVE_OK;
}

// The entry points that predate bits_bytes pass this: their caller vouches for count / 8 bytes, so only
// a NULL bits is refused.
constexpr size_t kBitsBytesUnknown = SIZE_MAX;

// sieve_mask_publish and sieve_mask_publish_for; comm is NULL for the process-wide registry.
int publish_bits(const char* function, const void* comm, const void* base, size_t count, int dtype, const uint8_t* bits,
                 size_t bits_bytes, uint64_t* mask_id) noexcept {
  return guarded(function, [&]() -> int {
    compress::DType type;
    if (int rc = check_buffer(function, base, count, dtype, &type)) return rc;
    if (int rc = check_bits(function, bits, bits_bytes, count)) return rc;
    return publish(function, base, type, compress::Mask::from_bitmap(bits, count), mask_id, comm);
  });
}

// sieve_mask_publish_ranges and sieve_mask_publish_ranges_for.
int publish_ranges(const char* function, const void* comm, const void* base, size_t count, int dtype,
                   const uint64_t* starts, const uint64_t* lengths, size_t nranges, uint64_t* mask_id) noexcept {
  return guarded(function, [&]() -> int {
    compress::DType type;
    if (int rc = check_buffer(function, base, count, dtype, &type)) return rc;
    if (nranges && (!starts || !lengths))
      return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": starts or lengths is NULL");
    compress::Mask mask;
    compress::Status s = compress::Mask::from_ranges(count, starts, lengths, nranges, &mask);
    if (!s.ok()) return fail(function, s);
    return publish(function, base, type, std::move(mask), mask_id, comm);
  });
}

// sieve_collective_mask_publish and sieve_collective_mask_publish_for. A given bits_bytes is checked
// before anything else and an unknown one (NULL bits only) after the dtype: each entry point's first
// error for a call with several faults stays what it always was.
int publish_collective(const char* function, const void* comm, int collective, size_t count, int dtype,
                       const uint8_t* bits, size_t bits_bytes, uint64_t* mask_id) noexcept {
  return guarded(function, [&]() -> int {
    if (bits_bytes != kBitsBytesUnknown)
      if (int rc = check_bits(function, bits, bits_bytes, count)) return rc;
    if (collective != SIEVE_COLLECTIVE_REDUCE_SCATTER && collective != SIEVE_COLLECTIVE_ALL_GATHER)
      return fail(SIEVE_ERR_INVALID_ARGUMENT,
                  std::string(function) + ": unknown collective " + std::to_string(collective) +
                      " (SIEVE_COLLECTIVE_REDUCE_SCATTER = 1, SIEVE_COLLECTIVE_ALL_GATHER = 2)");
    if (count == 0) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": count is 0");
    if (dtype < 0 || dtype >= SIEVE_DTYPE_COUNT)
      return fail(SIEVE_ERR_UNKNOWN_DTYPE, std::string(function) + ": unknown dtype " + std::to_string(dtype));
    if (!bits) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": bits is NULL");
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(uint64_t(count), uint64_t(sieve_dtype_size(dtype)), &bytes) || bytes > kAddressSpaceEnd)
      return fail(SIEVE_ERR_RANGE,
                  std::string(function) + ": " + std::to_string(count) + " elements cannot be one buffer");
    auto mask = std::make_shared<const compress::Mask>(compress::Mask::from_bitmap(bits, count));
    warn_if_keeps_nothing(function, *mask);
    uint64_t id = 0;
    // The one place SIEVE_COLLECTIVE_* becomes compress::Collective.
    const compress::Collective target = collective == SIEVE_COLLECTIVE_REDUCE_SCATTER
                                            ? compress::Collective::kReduceScatter
                                            : compress::Collective::kAllGather;
    compress::Status s = mask_registry().publish_collective(target, compress::DType(dtype), std::move(mask), &id,
                                                            uint64_t(reinterpret_cast<uintptr_t>(comm)));
    if (!s.ok()) return fail(function, s);
    if (mask_id) *mask_id = id;
    return SIEVE_OK;
  });
}

}  // namespace

int record_failure(int code, const std::string& detail) { return fail(code, detail); }

}  // namespace sieve::plugin

using sieve::plugin::fail;
using sieve::plugin::guarded;
using sieve::plugin::size_too_small;

extern "C" {

const char* sieve_version(void) { return SIEVE_VERSION_STRING; }

const char* sieve_strerror(int code) {
  switch (code) {
    case SIEVE_OK: return "success";
    case SIEVE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SIEVE_ERR_UNKNOWN_DTYPE: return "unknown dtype";
    case SIEVE_ERR_RANGE: return "out of range";
    case SIEVE_ERR_NOT_FOUND: return "no mask published at that address";
    case SIEVE_ERR_MALFORMED: return "malformed mask file";
    case SIEVE_ERR_IO: return "file could not be read";
    case SIEVE_ERR_NO_MEMORY: return "out of memory";
    case SIEVE_ERR_INTERNAL: return "internal error";
    case SIEVE_ERR_UNAVAILABLE: return "the collective proxy is not available";
    case SIEVE_ERR_NCCL: return "NCCL failed the collective";
    default: return "unknown error code";
  }
}

const char* sieve_last_error(void) { return sieve::plugin::t_last_error.c_str(); }

size_t sieve_dtype_size(int dtype) {
  if (dtype < 0 || dtype >= SIEVE_DTYPE_COUNT) return 0;
  return sieve::compress::dtype_size(sieve::compress::DType(dtype));
}

int sieve_mask_publish(const void* base, size_t count, int dtype, const uint8_t* bits, uint64_t* mask_id) {
  return sieve::plugin::publish_bits("sieve_mask_publish", nullptr, base, count, dtype, bits,
                                     sieve::plugin::kBitsBytesUnknown, mask_id);
}

int sieve_mask_publish_ranges(const void* base, size_t count, int dtype, const uint64_t* starts,
                              const uint64_t* lengths, size_t nranges, uint64_t* mask_id) {
  return sieve::plugin::publish_ranges("sieve_mask_publish_ranges", nullptr, base, count, dtype, starts, lengths,
                                       nranges, mask_id);
}

int sieve_mask_publish_file(const void* base, size_t count, int dtype, const char* path, uint64_t* mask_id) {
  static const char* const kFn = "sieve_mask_publish_file";
  return guarded(kFn, [&]() -> int {
    sieve::compress::DType type;
    if (int rc = sieve::plugin::check_buffer(kFn, base, count, dtype, &type)) return rc;
    if (!path) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": path is NULL");
    sieve::compress::MaskFile file;
    sieve::compress::Status s = sieve::compress::load_mask_file(path, &file);
    if (!s.ok()) return sieve::plugin::fail(kFn, s);
    if (file.combined.count() != count)
      return fail(SIEVE_ERR_RANGE, std::string(kFn) + ": " + path + " holds " + std::to_string(file.combined.count()) +
                                       " mask elements, the buffer " + std::to_string(count));
    return sieve::plugin::publish(kFn, base, type, std::move(file.combined), mask_id);
  });
}

int sieve_collective_mask_publish(int collective, size_t count, int dtype, const uint8_t* bits, uint64_t* mask_id) {
  return sieve::plugin::publish_collective("sieve_collective_mask_publish", nullptr, collective, count, dtype, bits,
                                           sieve::plugin::kBitsBytesUnknown, mask_id);
}

int sieve_mask_publish_for(void* comm, const void* base, size_t count, int dtype, const uint8_t* bits,
                           size_t bits_bytes, uint64_t* mask_id) {
  return sieve::plugin::publish_bits("sieve_mask_publish_for", comm, base, count, dtype, bits, bits_bytes, mask_id);
}

int sieve_mask_publish_ranges_for(void* comm, const void* base, size_t count, int dtype, const uint64_t* starts,
                                  const uint64_t* lengths, size_t nranges, uint64_t* mask_id) {
  return sieve::plugin::publish_ranges("sieve_mask_publish_ranges_for", comm, base, count, dtype, starts, lengths,
                                       nranges, mask_id);
}

int sieve_collective_mask_publish_for(void* comm, int collective, size_t count, int dtype, const uint8_t* bits,
                                      size_t bits_bytes, uint64_t* mask_id) {
  return sieve::plugin::publish_collective("sieve_collective_mask_publish_for", comm, collective, count, dtype, bits,
                                           bits_bytes, mask_id);
}

int sieve_mask_retract(const void* base) {
  static const char* const kFn = "sieve_mask_retract";
  return guarded(kFn, [&]() -> int {
    if (!base) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": base is NULL");
    sieve::compress::Status s = sieve::plugin::mask_registry().retract(base);
    return s.ok() ? SIEVE_OK : sieve::plugin::fail(kFn, s);
  });
}

int sieve_mask_retract_id(uint64_t mask_id) {
  static const char* const kFn = "sieve_mask_retract_id";
  return guarded(kFn, [&]() -> int {
    if (mask_id == 0) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": mask ids start at 1");
    sieve::compress::Status s = sieve::plugin::mask_registry().retract_id(mask_id);
    return s.ok() ? SIEVE_OK : sieve::plugin::fail(kFn, s);
  });
}

int sieve_mask_released(uint64_t mask_id, int* released) {
  static const char* const kFn = "sieve_mask_released";
  return guarded(kFn, [&]() -> int {
    if (!released) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": released is NULL");
    bool out = false;
    sieve::compress::Status s = sieve::plugin::mask_registry().released(mask_id, &out);
    if (!s.ok()) return sieve::plugin::fail(kFn, s);
    *released = out ? 1 : 0;
    return SIEVE_OK;
  });
}

int sieve_comm_commit(void* comm, void* stream, uint32_t flags, sieve_commit_result_t* result) {
  static const char* const kFn = "sieve_comm_commit";
  return guarded(kFn, [&]() -> int {
    if (!comm) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": comm is NULL");
    if (int rc = sieve::plugin::check_commit(kFn, flags, result)) return rc;
    const sieve::plugin::ProxyCommitApi* api = sieve::plugin::proxy_commit_api();
    if (!api)
      return fail(SIEVE_ERR_UNAVAILABLE, std::string(kFn) +
                                             ": this library was built without the collective proxy "
                                             "(no CUDA toolkit at build time)");
    const int rc = api->commit(comm, stream, flags, result);
    if (rc == sieve::plugin::kCommitUnreachable)
      return fail(SIEVE_ERR_UNAVAILABLE, std::string(kFn) +
                                             ": no NCCL can be reached from this process (is the "
                                             "library LD_PRELOADed into a job that loads libnccl?)");
    if (rc)
      return fail(SIEVE_ERR_NCCL, std::string(kFn) + ": the commit's collective failed with NCCL error " +
                                      std::to_string(rc) + " (the NET/Sieve log says why)");
    return SIEVE_OK;
  });
}

int sieve_commit_arm(const void* token, uint32_t flags) {
  static const char* const kFn = "sieve_commit_arm";
  return guarded(kFn, [&]() -> int {
    if (!token) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": token is NULL");
    if (int rc = sieve::plugin::check_commit(kFn, flags, nullptr)) return rc;
    const sieve::plugin::ProxyCommitApi* api = sieve::plugin::proxy_commit_api();
    if (!api)
      return fail(SIEVE_ERR_UNAVAILABLE, std::string(kFn) +
                                             ": this library was built without the collective proxy "
                                             "(no CUDA toolkit at build time)");
    api->arm(token, flags);
    return SIEVE_OK;
  });
}

int sieve_commit_outcome(const void* token, sieve_commit_result_t* result) {
  static const char* const kFn = "sieve_commit_outcome";
  return guarded(kFn, [&]() -> int {
    if (!token || !result) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": token or result is NULL");
    if (int rc = sieve::plugin::check_commit(kFn, 0, result)) return rc;
    const sieve::plugin::ProxyCommitApi* api = sieve::plugin::proxy_commit_api();
    if (!api || !api->outcome(token, result))
      return fail(SIEVE_ERR_NOT_FOUND, std::string(kFn) +
                                           ": the commit's all-reduce never reached the collective "
                                           "proxy (is the library LD_PRELOADed, in a CUDA build, and "
                                           "does the process group use NCCL?); every rank refused it");
    return SIEVE_OK;
  });
}

int sieve_mask_query(const void* base, sieve_mask_info_t* info) {
  static const char* const kFn = "sieve_mask_query";
  return guarded(kFn, [&]() -> int {
    if (!base || !info) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": base or info is NULL");
    if (info->size < sizeof(info->size)) return size_too_small(kFn, "info->size", info->size, "sieve_mask_info_t");
    std::shared_ptr<const sieve::compress::PublishedMask> entry = sieve::plugin::mask_registry().find(base);
    if (!entry) return fail(SIEVE_ERR_NOT_FOUND, std::string(kFn) + ": no mask is published at this address");
    sieve_mask_info_t full;
    std::memset(&full, 0, sizeof full);
    full.size = std::min(info->size, sizeof full);
    full.mask_id = entry->id();
    full.count = entry->count();
    full.kept = entry->mask()->kept();
    full.hash = entry->mask()->hash();
    full.dtype = int(entry->dtype());
    std::memcpy(info, &full, full.size);
    return SIEVE_OK;
  });
}

int sieve_stats_get(sieve_stats_t* out) {
  static const char* const kFn = "sieve_stats_get";
  return guarded(kFn, [&]() -> int {
    if (!out) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(kFn) + ": out is NULL");
    if (out->size < sizeof(out->size)) return size_too_small(kFn, "out->size", out->size, "sieve_stats_t");
    const sieve::plugin::ProcessStats& p = sieve::plugin::process_stats();
    auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    sieve_stats_t full;
    std::memset(&full, 0, sizeof full);
    full.size = std::min(out->size, sizeof full);
    full.bytes_logical_sent = get(p.bytes_logical_sent);
    full.bytes_wire_sent = get(p.bytes_wire_sent);
    full.bytes_logical_received = get(p.bytes_logical_received);
    full.bytes_wire_received = get(p.bytes_wire_received);
    full.messages_sent = get(p.messages_sent);
    full.messages_received = get(p.messages_received);
    full.collectives_dense = get(p.collectives_dense);
    full.collectives_compacted = get(p.collectives_compacted);
    full.mask_violations = get(p.mask_violations);
    full.connections_rejected = get(p.connections_rejected);
    full.masks_published = sieve::plugin::mask_registry().size();
    full.tables_activated = get(p.tables_activated);
    full.tables_refused = get(p.tables_refused);
    full.learned_calls_observed = get(p.learned_calls_observed);
    full.learned_bytes_saved = get(p.learned_bytes_saved);
    full.learned_pattern_changes = get(p.learned_pattern_changes);
    full.learned_signatures_retired = get(p.learned_signatures_retired);
    std::memcpy(out, &full, full.size);
    return SIEVE_OK;
  });
}

}  // extern "C"
