// SPDX-License-Identifier: Apache-2.0
/* Sieve's public C API for trainers and scripts (C99; also usable through Python's ctypes).
 *
 * A trainer publishes the sparsity masks of the buffers it will all-reduce (gradients or whole
 * gradient buckets), then commits them on a communicator; the collective proxy then sends only the
 * kept elements on that communicator. Publishing and retracting only stage: nothing changes until a
 * commit. A commit is a collective: every rank of the communicator issues it at the same point of
 * that communicator's sequence, like any other collective, and the staged table becomes active there
 * only when every rank agrees on it (the same masks in the same publish order, the same settings);
 * otherwise every rank runs that communicator dense from that point and logs why (docs/DESIGN.md,
 * "How the proxy keeps ranks consistent").
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
  SIEVE_ERR_RANGE = -3,     /* ranges past the end or overlapping; a count whose buffer does not fit in memory */
  SIEVE_ERR_NOT_FOUND = -4, /* no mask published at that address */
  SIEVE_ERR_MALFORMED = -5, /* a mask file that does not follow its format */
  SIEVE_ERR_IO = -6,        /* a file could not be opened or read */
  SIEVE_ERR_NO_MEMORY = -7,
  SIEVE_ERR_INTERNAL = -8,
  SIEVE_ERR_UNAVAILABLE = -9, /* the collective proxy cannot run here (no CUDA build, or no NCCL to reach) */
  SIEVE_ERR_NCCL = -10        /* NCCL failed the commit's collective (the communicator is aborted) */
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
/* What this library was built from: the git commit (12 hex digits, "-dirty" when tracked files had
 * changed), or "src-" and a hash of the sources outside a git checkout. The same for two builds of one
 * commit; python -m sieve --version prints it. */
SIEVE_API const char* sieve_build_id(void);
/* A static message for any code (unknown codes included). */
SIEVE_API const char* sieve_strerror(int code);
/* The reason for this thread's latest failed call ("" if none failed yet); valid until the
 * thread's next failing call. */
SIEVE_API const char* sieve_last_error(void);
/* Bytes per element of a dtype; 0 for an unknown dtype. */
SIEVE_API size_t sieve_dtype_size(int dtype);

/* Publishes (stages) the mask of the buffer at base holding count elements of dtype: bit i of bits
 * (LSB first within each byte, ceil(count / 8) bytes) set = element i kept; elements not kept must be
 * zero in every buffer reduced with this mask (their values are not sent). The mask is copied.
 * Publishing a buffer that overlaps staged ones replaces them. Nothing changes until the next commit
 * on each communicator (sieve_comm_commit): until then a communicator keeps compacting with what its
 * last agreed commit activated. Free a published buffer only once sieve_mask_released() says so.
 * mask_id (optional) receives an id that is never 0 and never reused in this process. */
/* It reads ceil(count / 8) bytes of bits and cannot check their length: sieve_mask_publish_for (below,
 * with comm NULL) takes the length and refuses a short array. */
SIEVE_API int sieve_mask_publish(const void* base, size_t count, int dtype, const uint8_t* bits, uint64_t* mask_id);
/* Same, with the kept elements given as nranges [starts[i], starts[i] + lengths[i]) ranges, in any
 * order; ranges past the end or overlapping each other are refused. */
SIEVE_API int sieve_mask_publish_ranges(const void* base, size_t count, int dtype, const uint64_t* starts,
                                        const uint64_t* lengths, size_t nranges, uint64_t* mask_id);
/* Same, reading the mask from a safetensors file: its BOOL/U8 tensors in data-offset order,
 * nonzero = kept; their total element count must equal count. */
SIEVE_API int sieve_mask_publish_file(const void* base, size_t count, int dtype, const char* path, uint64_t* mask_id);
/* Collectives whose buffers are new every step (FSDP's reduce-scatter input, its all-gathered
 * parameters): a mask names the collective instead of a buffer. */
enum { SIEVE_COLLECTIVE_REDUCE_SCATTER = 1, SIEVE_COLLECTIVE_ALL_GATHER = 2 };
/* Publishes (stages) the mask of every reduce-scatter or all-gather that moves count elements of dtype
 * across all ranks (the whole buffer: nranks x the per-rank count, rank 0's part first), whatever
 * buffers it is given. Bits as for sieve_mask_publish. A call compacts only with a mask its shape
 * identifies for certain: the one committed mask of that shape, or several that are all equal. Where
 * a communicator's committed masks of one shape differ (identical layers pruned differently), no
 * call can say which is its own (a step may skip or repeat a collective), so calls of that shape
 * run dense, on every rank. */
SIEVE_API int sieve_collective_mask_publish(int collective, size_t count, int dtype, const uint8_t* bits,
                                            uint64_t* mask_id);
/* Publishes for one communicator. The functions above publish for every communicator (unscoped);
 * these publish for comm only (an ncclComm_t; NULL: every communicator, as above). A commit on a
 * communicator takes the unscoped masks and those published for it, so a publish for another
 * communicator, from any thread at any moment, never changes what it votes on. A buffer carries
 * masks of one scope only: a publish overlapping a staged mask of another scope is refused
 * (SIEVE_ERR_RANGE). bits_bytes is the length of bits: shorter than ceil(count / 8) is refused
 * (SIEVE_ERR_RANGE) instead of read past its end. A communicator is known by its handle: retract its masks when it is
 * destroyed (NCCL may give a new communicator the same handle). Present when SIEVE_HAS_PUBLISH_FOR is defined. */
#define SIEVE_HAS_PUBLISH_FOR 1
SIEVE_API int sieve_mask_publish_for(void* comm, const void* base, size_t count, int dtype, const uint8_t* bits,
                                     size_t bits_bytes, uint64_t* mask_id);
SIEVE_API int sieve_mask_publish_ranges_for(void* comm, const void* base, size_t count, int dtype,
                                            const uint64_t* starts, const uint64_t* lengths, size_t nranges,
                                            uint64_t* mask_id);
SIEVE_API int sieve_collective_mask_publish_for(void* comm, int collective, size_t count, int dtype,
                                                const uint8_t* bits, size_t bits_bytes, uint64_t* mask_id);
/* Unstages the mask published at base (exactly the base given to a publish call). Like a publish, it
 * takes effect on each communicator at its next commit. */
SIEVE_API int sieve_mask_retract(const void* base);
/* Unstages the mask with this id, if it is still staged (SIEVE_ERR_NOT_FOUND otherwise). */
SIEVE_API int sieve_mask_retract_id(uint64_t mask_id);
/* *released = 1 when mask mask_id is neither staged nor held by the agreed table of any communicator
 * (a commit since its retraction replaced every table that held it): its buffer may be freed, or its
 * address reused, without a communicator compacting there. 0 while it is still in use. */
SIEVE_API int sieve_mask_released(uint64_t mask_id, int* released);

/* Commit flags. */
enum {
  /* Ranks may publish different masks for the same buffers (same buffers, counts, dtypes and publish
   * order): the commit ORs the masks across ranks and every rank compacts on the union (PruneX). */
  SIEVE_COMMIT_UNION = 1
};
/* What a commit decided on its communicator. Set size = sizeof(sieve_commit_result_t) first. */
enum { SIEVE_COMMIT_REFUSED = 0, SIEVE_COMMIT_ACTIVATED = 1, SIEVE_COMMIT_PENDING = 2 };
typedef struct {
  size_t size;
  int state;           /* SIEVE_COMMIT_*: PENDING when issued inside ncclGroupStart/End (decided, and
                          logged, at the group's end) */
  uint64_t commit;     /* this communicator's commit number: 1, 2, ... */
  uint64_t masks;      /* entries in the agreed table */
  uint64_t compacting; /* of them, entries that compact (the rest are too dense, too small or not float) */
  char reason[256];    /* why not, when REFUSED; the same text on every rank */
} sieve_commit_result_t;
/* Commits what is staged on one NCCL communicator (an ncclComm_t) on one CUDA stream (a cudaStream_t):
 * a collective, issued by every rank of comm at the same point of comm's sequence. It exchanges one
 * 48-byte vote (with SIEVE_COMMIT_UNION also the masks themselves) on comm, waits for it, and from
 * this point of comm's sequence compacts with the agreed table, or, when the ranks did not agree
 * (different masks, settings, or a rank whose proxy is off or absent), runs comm dense on every rank.
 * Needs the collective proxy (the library LD_PRELOADed in a CUDA build): SIEVE_ERR_UNAVAILABLE
 * otherwise. result is optional. */
SIEVE_API int sieve_comm_commit(void* comm, void* stream, uint32_t flags, sieve_commit_result_t* result);

/* For bindings that can issue a collective but cannot name NCCL's communicator (Python's
 * torch.distributed): the commit travels as the binding's own all-reduce of a token. The binding
 * fills a device buffer of SIEVE_COMMIT_TOKEN_WORDS int64 values with the "no proxy" vote (every word
 * INT64_MIN except word 4, which is SIEVE_COMMIT_TOKEN_NO_PROXY), arms it here, and all-reduces it in
 * place with max on the process group. The proxy recognises that all-reduce (this thread, this
 * buffer, that count, int64, max) and runs it as the commit on its communicator, writing this rank's
 * vote into the token; where no proxy intercepts it, the "no proxy" vote makes every rank refuse. */
#define SIEVE_COMMIT_TOKEN_WORDS 6
#define SIEVE_COMMIT_TOKEN_NO_PROXY 3
SIEVE_API int sieve_commit_arm(const void* token, uint32_t flags);
/* After that all-reduce returned: what the commit decided. SIEVE_ERR_NOT_FOUND when the all-reduce
 * never reached the proxy (then every rank refused it). */
SIEVE_API int sieve_commit_outcome(const void* token, sieve_commit_result_t* result);

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
  uint64_t bytes_logical_sent; /* bytes NCCL handed to the net plugin to send */
  uint64_t bytes_wire_sent;    /* bytes that left through the sockets, headers included */
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
  uint64_t learned_calls_observed; /* all-reduces SIEVE_TRACK watched (on or observe) */
  uint64_t learned_bytes_saved;    /* bytes learned masks kept off the wire (observe: would have) */
  uint64_t
      learned_pattern_changes; /* stable zero patterns that changed: a return to dense (observe: would have been) */
  uint64_t learned_signatures_retired; /* learned masks that fell back too often: dense, no longer learned */
} sieve_stats_t;
SIEVE_API int sieve_stats_get(sieve_stats_t* out);

/* What this build of the library holds, as SIEVE_CAP_* bits. */
#define SIEVE_CAP_CUDA_COMPACT 1 /* sieve_compact_gather/scatter run Sieve's CUDA kernels */
#define SIEVE_CAP_HOST_COMPACT 2 /* sieve_compact_gather_host/scatter_host: Sieve's CPU kernels (every build) */
#define SIEVE_CAP_PROXY 4        /* the collective proxy: ncclAllReduce & co. exported for LD_PRELOAD (CUDA builds) */
#define SIEVE_CAP_VERBS 8 /* the verbs (InfiniBand/RoCE) transport; libibverbs itself is loaded when NCCL starts it */
SIEVE_API uint32_t sieve_capabilities(void);

/* Compaction on the GPU for callers that compact their own buffers (Python's sieve.ddp and sieve.fsdp):
 * the collective proxy's kernels on device pointers, enqueued on stream (a cudaStream_t; NULL: the
 * legacy default stream), never synchronising or allocating. The mask lies in device memory as the
 * kernels read it: bits, ceil(count / 32) uint32 words (bit i % 32 of word i / 32 set = element i kept),
 * and tile_base, ceil(count / T) + 1 uint64 values, T = sieve_compact_tile_elements(): the kept
 * elements before each tile of T elements, the last one being nnz (the kept elements in all). Elements
 * move as bits, element_size 2, 4 or 8 bytes. gather: compact[j] = the j-th kept element of src, j < nnz.
 * scatter: dst[i] = its kept value from compact, +0 (all bits clear) where not kept; dst may be the
 * gather's src. SIEVE_ERR_UNAVAILABLE where the library was built without CUDA (see
 * sieve_capabilities()); a CUDA launch failure is SIEVE_ERR_INTERNAL with CUDA's error in
 * sieve_last_error(). */
SIEVE_API uint64_t sieve_compact_tile_elements(void);
SIEVE_API int sieve_compact_gather(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                                   size_t element_size, const void* src, void* compact, void* stream);
SIEVE_API int sieve_compact_scatter(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                                    size_t element_size, const void* compact, void* dst, void* stream);

/* The same compaction on the CPU, on host pointers, in every build (SIEVE_CAP_HOST_COMPACT): for CPU
 * tensors (sieve.ddp on Gloo) and sieve-bench. bits and tile_base as above, in host memory, describing
 * the whole buffer of count elements with nnz kept; these move the kept elements of elements
 * [first, first + span) only (first = 0, span = count: all of them), so a caller can cut a buffer into
 * pieces. src and dst are the buffer's element 0; compact holds the span's kept elements alone
 * (tile_base says how many: the kept elements before first + span minus those before first).
 * gather: compact[j] = the j-th kept element of the span. scatter: every element of the span = its
 * kept value from compact, +0 (all bits clear) where not kept; elements outside the span untouched.
 * In place: compact may be exactly src + first elements (gather: the kept elements move to the span's
 * front) or dst + first elements (scatter: they move back out); any other overlap of compact with
 * the buffer is refused (SIEVE_ERR_INVALID_ARGUMENT). No alignment needed. threads: the most threads
 * the call may use, at least 1 (a job passes its own thread count); it starts fewer where they would
 * not pay (below 16 MiB of span per thread) and uses one in place. span 0 does nothing. tile_base's
 * last entry (index ceil(count / T)) must be nnz: a layout of another mask is refused. The path (AVX-512 VBMI2,
 * AVX2 or scalar) is chosen from the CPU once; every path writes the same bits. Synchronous: the
 * call returns when the copy is done. */
SIEVE_API int sieve_compact_gather_host(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                                        size_t element_size, uint64_t first, uint64_t span, const void* src,
                                        void* compact, int threads);
SIEVE_API int sieve_compact_scatter_host(const uint32_t* bits, const uint64_t* tile_base, uint64_t count, uint64_t nnz,
                                         size_t element_size, uint64_t first, uint64_t span, const void* compact,
                                         void* dst, int threads);

#ifdef __cplusplus
}
#endif

#endif /* SIEVE_H_ */
