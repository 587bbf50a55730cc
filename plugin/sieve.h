/* Sieve's public C API for trainers and scripts (C99; also usable through Python's ctypes).
 *
 * A trainer publishes the sparsity masks of the buffers it will all-reduce (gradients or whole
 * gradient buckets), then commits them; the collective proxy then sends only the kept elements.
 * Publishing stages a mask; sieve_commit() hands the staged table to the proxy, which activates it on
 * each communicator only after every rank of that communicator has agreed on it (the same masks, in
 * the same publish order). Call publish, retract and commit at the same point of the program on
 * every rank, from the thread that drives the training loop (see docs/DESIGN.md, "Consistency").
 *
 * Every function returns 0 (SIEVE_OK) or a negative SIEVE_ERR_* code; sieve_strerror() names the
 * code and sieve_last_error() gives the specific reason for the calling thread's latest failure. Bad
 * input never stores anything, and no C++ exception ever leaves these functions. All functions are
 * thread-safe. */
#ifndef SIEVE_H_
#define SIEVE_H_

#include <stddef.h>
#include <stdint.h>

#include "sieve_version.h" /* SIEVE_VERSION_STRING, from CMake's project VERSION */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SIEVE_API __attribute__((visibility("default")))
#else
#define SIEVE_API
#endif

/* Return codes. */
enum {
  SIEVE_OK = 0,
  SIEVE_ERR_INVALID_ARGUMENT = -1, /* null pointer, zero count, bad struct size */
  SIEVE_ERR_UNKNOWN_DTYPE = -2,
  SIEVE_ERR_RANGE = -3,            /* ranges past the end or overlapping; a count whose buffer does not fit in memory */
  SIEVE_ERR_NOT_FOUND = -4,        /* no mask published at that address */
  SIEVE_ERR_MALFORMED = -5,        /* a mask file that does not follow its format */
  SIEVE_ERR_IO = -6,               /* a file could not be opened or read */
  SIEVE_ERR_NO_MEMORY = -7,
  SIEVE_ERR_INTERNAL = -8
};

/* Element types of published buffers (they set the element size). */
enum {
  SIEVE_DTYPE_F32 = 0,
  SIEVE_DTYPE_F16 = 1,
  SIEVE_DTYPE_BF16 = 2,
  SIEVE_DTYPE_F64 = 3,
  SIEVE_DTYPE_I8 = 4,
  SIEVE_DTYPE_U8 = 5,
  SIEVE_DTYPE_I32 = 6,
  SIEVE_DTYPE_I64 = 7,
  SIEVE_DTYPE_COUNT = 8
};

SIEVE_API const char* sieve_version(void);
/* A static message for any code (unknown codes included). */
SIEVE_API const char* sieve_strerror(int code);
/* The reason for this thread's latest failed call ("" if none failed yet); valid until the
 * thread's next failing call. */
SIEVE_API const char* sieve_last_error(void);
/* Bytes per element of a dtype; 0 for an unknown dtype. */
SIEVE_API size_t sieve_dtype_size(int dtype);

/* Publishes (stages) the mask of the buffer at base holding count elements of dtype: bit i of bits
 * (LSB first within each byte, ceil(count / 8) bytes) set = element i kept; elements not kept must be
 * zero in every buffer all-reduced with this mask (their values are not sent). The mask is copied.
 * Publishing a buffer that overlaps published ones replaces them, and the proxy stops using the
 * replaced masks at once; the new mask is used after the next sieve_commit(). A published buffer must
 * be retracted before its memory is freed (the Python binding does this when the tensor dies).
 * mask_id (optional) receives an id that is never 0 and never reused in this process. */
SIEVE_API int sieve_mask_publish(const void* base, size_t count, int dtype, const uint8_t* bits, uint64_t* mask_id);
/* Same, with the kept elements given as nranges [starts[i], starts[i] + lengths[i]) ranges, in any
 * order; ranges past the end or overlapping each other are refused. */
SIEVE_API int sieve_mask_publish_ranges(const void* base, size_t count, int dtype, const uint64_t* starts,
                                        const uint64_t* lengths, size_t nranges, uint64_t* mask_id);
/* Same, reading the mask from a safetensors file: its BOOL/U8 tensors in data-offset order,
 * nonzero = kept; their total element count must equal count. */
SIEVE_API int sieve_mask_publish_file(const void* base, size_t count, int dtype, const char* path, uint64_t* mask_id);
/* Removes the mask published at base (exactly the base given to a publish call); the proxy stops
 * using it at once. */
SIEVE_API int sieve_mask_retract(const void* base);
/* Removes the mask with this id, if it is still published (SIEVE_ERR_NOT_FOUND otherwise): for a
 * finalizer that must not remove a newer mask published at the same address since. */
SIEVE_API int sieve_mask_retract_id(uint64_t mask_id);

/* Commit flags. */
enum {
  /* Ranks may publish different masks for the same buffers (same buffers, counts, dtypes and publish
   * order): the commit ORs the masks across ranks and every rank compacts on the union (PruneX). */
  SIEVE_COMMIT_UNION = 1
};
/* Hands the published masks to the collective proxy. Every rank calls it at the same point, after
 * its publishes. On each communicator, the proxy's next collective first runs a small agreement (one
 * 48-byte all-reduce; with SIEVE_COMMIT_UNION also the masks themselves) and activates the table only
 * if every rank committed the same one and could prepare it; otherwise every rank keeps running
 * dense and logs why. Returns the commit's number (1, 2, ...) through epoch (optional). */
SIEVE_API int sieve_commit(uint32_t flags, uint64_t* epoch);

/* What is published at base. Set size = sizeof(sieve_mask_info_t) before the call. */
typedef struct {
  size_t size;
  uint64_t mask_id;
  uint64_t count; /* elements */
  uint64_t kept;  /* kept elements */
  uint64_t hash;  /* stable across processes and hosts: equal masks have equal hashes */
  int dtype;      /* as published */
} sieve_mask_info_t;
SIEVE_API int sieve_mask_query(const void* base, sieve_mask_info_t* info);

/* Process-wide counters. Set size = sizeof(sieve_stats_t); the library fills the fields it knows
 * that fit in size bytes, so programs built against an older, shorter struct keep working. */
typedef struct {
  size_t size;
  uint64_t bytes_logical_sent;     /* bytes NCCL handed to the net plugin to send */
  uint64_t bytes_wire_sent;        /* bytes that left through the sockets, headers included */
  uint64_t bytes_logical_received;
  uint64_t bytes_wire_received;
  uint64_t messages_sent;
  uint64_t messages_received;
  uint64_t collectives_dense;      /* collectives the proxy passed through unchanged */
  uint64_t collectives_compacted;  /* collectives run on the mask-compacted buffer */
  uint64_t mask_violations;        /* nonzero values found where a mask prunes */
  uint64_t connections_rejected;   /* stray, bad-magic or bad-token connections dropped */
  uint64_t masks_published;        /* masks currently published */
  uint64_t tables_activated;       /* committed tables every rank of a communicator agreed on */
  uint64_t tables_refused;         /* committed tables the ranks of a communicator did not agree on */
} sieve_stats_t;
SIEVE_API int sieve_stats_get(sieve_stats_t* out);

#ifdef __cplusplus
}
#endif

#endif /* SIEVE_H_ */
