// The C API of sieve.h. Every entry point catches everything: a C caller (or ctypes) gets a code
// and a message, never an exception.
#include "plugin/sieve.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "compress/safetensors.h"
#include "plugin/sieve_api.h"
#include "plugin/stats.h"

namespace sieve::plugin {

compress::MaskRegistry& mask_registry() {
  static compress::MaskRegistry registry;
  return registry;
}

namespace {

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

int fail(const compress::Status& s) { return fail(code_of(s), s.message()); }

// Runs body, turning any escaping exception into a code.
template <typename Body> int guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(SIEVE_ERR_NO_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(SIEVE_ERR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(SIEVE_ERR_INTERNAL, std::string(function) + ": unexpected failure");
  }
}

// The checks every publish shares; on success *element_size is the dtype's size.
int check_buffer(const char* function, const void* base, size_t count, int dtype, size_t* element_size) {
  if (!base) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": base is NULL");
  if (count == 0) return fail(SIEVE_ERR_INVALID_ARGUMENT, std::string(function) + ": count is 0");
  *element_size = sieve_dtype_size(dtype);
  if (*element_size == 0)
    return fail(SIEVE_ERR_UNKNOWN_DTYPE, std::string(function) + ": unknown dtype " + std::to_string(dtype));
  return SIEVE_OK;
}

int publish(const void* base, size_t element_size, compress::Mask&& mask, uint64_t* mask_id) {
  uint64_t id = 0;
  compress::Status s = mask_registry().publish(base, element_size, std::make_shared<const compress::Mask>(std::move(mask)), &id);
  if (!s.ok()) return fail(s);
  if (mask_id) *mask_id = id;
  return SIEVE_OK;
}

}  // namespace
}  // namespace sieve::plugin

using sieve::plugin::fail;
using sieve::plugin::guarded;

extern "C" {

const char* sieve_version(void) { return SIEVE_VERSION_STRING; }

const char* sieve_strerror(int code) {
  switch (code) {
    case SIEVE_OK: return "success";
    case SIEVE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SIEVE_ERR_UNKNOWN_DTYPE: return "unknown dtype";
    case SIEVE_ERR_RANGE: return "range past the end of the buffer or overlapping another";
    case SIEVE_ERR_NOT_FOUND: return "no mask published at that address";
    case SIEVE_ERR_MALFORMED: return "malformed mask file";
    case SIEVE_ERR_IO: return "file could not be read";
    case SIEVE_ERR_NO_MEMORY: return "out of memory";
    case SIEVE_ERR_INTERNAL: return "internal error";
    default: return "unknown error code";
  }
}

const char* sieve_last_error(void) { return sieve::plugin::t_last_error.c_str(); }

size_t sieve_dtype_size(int dtype) {
  switch (dtype) {
    case SIEVE_DTYPE_F32: return 4;
    case SIEVE_DTYPE_F16: return 2;
    case SIEVE_DTYPE_BF16: return 2;
    case SIEVE_DTYPE_F64: return 8;
    case SIEVE_DTYPE_I8: return 1;
    case SIEVE_DTYPE_U8: return 1;
    case SIEVE_DTYPE_I32: return 4;
    case SIEVE_DTYPE_I64: return 8;
    default: return 0;
  }
}

int sieve_mask_publish(const void* base, size_t count, int dtype, const uint8_t* bits, uint64_t* mask_id) {
  return guarded("sieve_mask_publish", [&]() -> int {
    size_t element_size = 0;
    if (int rc = sieve::plugin::check_buffer("sieve_mask_publish", base, count, dtype, &element_size)) return rc;
    if (!bits) return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_publish: bits is NULL");
    return sieve::plugin::publish(base, element_size, sieve::compress::Mask::from_bitmap(bits, count), mask_id);
  });
}

int sieve_mask_publish_ranges(const void* base, size_t count, int dtype, const uint64_t* starts,
                              const uint64_t* lengths, size_t nranges, uint64_t* mask_id) {
  return guarded("sieve_mask_publish_ranges", [&]() -> int {
    size_t element_size = 0;
    if (int rc = sieve::plugin::check_buffer("sieve_mask_publish_ranges", base, count, dtype, &element_size)) return rc;
    if (nranges && (!starts || !lengths))
      return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_publish_ranges: starts or lengths is NULL");
    sieve::compress::Mask mask;
    sieve::compress::Status s = sieve::compress::Mask::from_ranges(count, starts, lengths, nranges, &mask);
    if (!s.ok()) return fail(sieve::plugin::code_of(s), "sieve_mask_publish_ranges: " + s.message());
    return sieve::plugin::publish(base, element_size, std::move(mask), mask_id);
  });
}

int sieve_mask_publish_file(const void* base, size_t count, int dtype, const char* path, uint64_t* mask_id) {
  return guarded("sieve_mask_publish_file", [&]() -> int {
    size_t element_size = 0;
    if (int rc = sieve::plugin::check_buffer("sieve_mask_publish_file", base, count, dtype, &element_size)) return rc;
    if (!path) return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_publish_file: path is NULL");
    sieve::compress::MaskFile file;
    sieve::compress::Status s = sieve::compress::load_mask_file(path, &file);
    if (!s.ok()) return fail(s);
    if (file.combined.count() != count)
      return fail(SIEVE_ERR_RANGE, std::string("sieve_mask_publish_file: ") + path + " holds " +
                                       std::to_string(file.combined.count()) + " mask elements, the buffer " +
                                       std::to_string(count));
    return sieve::plugin::publish(base, element_size, std::move(file.combined), mask_id);
  });
}

int sieve_mask_retract(const void* base) {
  return guarded("sieve_mask_retract", [&]() -> int {
    if (!base) return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_retract: base is NULL");
    sieve::compress::Status s = sieve::plugin::mask_registry().retract(base);
    if (!s.ok()) return fail(sieve::plugin::code_of(s), "sieve_mask_retract: " + s.message());
    return SIEVE_OK;
  });
}

int sieve_mask_query(const void* base, sieve_mask_info_t* info) {
  return guarded("sieve_mask_query", [&]() -> int {
    if (!base || !info) return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_query: base or info is NULL");
    if (info->size < sizeof(info->size))
      return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_mask_query: info->size must be sizeof(sieve_mask_info_t)");
    sieve::compress::MaskEntry entry;
    if (!sieve::plugin::mask_registry().find(base, &entry))
      return fail(SIEVE_ERR_NOT_FOUND, "sieve_mask_query: no mask is published at this address");
    sieve_mask_info_t full;
    std::memset(&full, 0, sizeof full);
    full.size = std::min(info->size, sizeof full);
    full.mask_id = entry.id;
    full.count = entry.mask->count();
    full.kept = entry.mask->kept();
    full.hash = entry.mask->hash();
    full.dtype = -1;
    for (int d = 0; d < SIEVE_DTYPE_COUNT; ++d)  // the first dtype of that size
      if (sieve_dtype_size(d) == entry.element_size) {
        full.dtype = d;
        break;
      }
    std::memcpy(info, &full, full.size);
    return SIEVE_OK;
  });
}

int sieve_stats_get(sieve_stats_t* out) {
  return guarded("sieve_stats_get", [&]() -> int {
    if (!out) return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_stats_get: out is NULL");
    if (out->size < sizeof(out->size))
      return fail(SIEVE_ERR_INVALID_ARGUMENT, "sieve_stats_get: out->size must be sizeof(sieve_stats_t)");
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
    std::memcpy(out, &full, full.size);
    return SIEVE_OK;
  });
}

}  // extern "C"
