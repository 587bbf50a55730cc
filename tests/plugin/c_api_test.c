// SPDX-License-Identifier: Apache-2.0
/* Exercises sieve.h from C99, linked against the built shared library: every entry point, bad input
 * included. A plain C program (no GoogleTest): it prints each failed check and exits nonzero. */
#include "plugin/sieve.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* A failing call must return `code`, leave a message, and have a strerror text. */
static void expect_error(int rc, int code) {
  CHECK(rc == code);
  CHECK(strlen(sieve_last_error()) > 0);
  CHECK(strcmp(sieve_strerror(rc), "unknown error code") != 0);
}

static float weights[1000];
static float other[64];

/* The host gather/scatter (every build): 100 floats, every third kept, whole and in pieces, in place,
 * and the arguments it refuses. */
static void check_host_compaction(void) {
  uint32_t bits[4] = {0, 0, 0, 0};
  uint64_t tile_base[2] = {0, 0};
  float buffer[100], compact[34], back[100];
  uint64_t i, kept = 0;
  for (i = 0; i < 100; ++i) {
    buffer[i] = (float)i + 0.5f;
    if (i % 3 == 0) bits[i / 32] |= 1u << (i % 32), ++kept;
  }
  tile_base[1] = kept;
  CHECK(kept == 34);
  CHECK(sieve_capabilities() & SIEVE_CAP_HOST_COMPACT);
  CHECK(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 100, buffer, compact, 1) == SIEVE_OK);
  for (i = 0; i < kept; ++i) CHECK(compact[i] == (float)(3 * i) + 0.5f);
  memset(back, 0xFF, sizeof back);
  CHECK(sieve_compact_scatter_host(bits, tile_base, 100, kept, 4, 0, 100, compact, back, 2) == SIEVE_OK);
  for (i = 0; i < 100; ++i) {
    uint32_t word;
    memcpy(&word, &back[i], 4);
    CHECK(i % 3 == 0 ? back[i] == buffer[i] : word == 0);
  }
  /* A piece: elements [10, 40) keep 12, 15, ..., 39: ten of them. */
  memset(compact, 0, sizeof compact);
  CHECK(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 10, 30, buffer, compact, 1) == SIEVE_OK);
  CHECK(compact[0] == 12.5f && compact[9] == 39.5f && compact[10] == 0.0f);
  /* In place: to the buffer's front and back. */
  memcpy(back, buffer, sizeof back);
  CHECK(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 100, back, back, 1) == SIEVE_OK);
  CHECK(back[1] == 3.5f && back[33] == 99.5f);
  CHECK(sieve_compact_scatter_host(bits, tile_base, 100, kept, 4, 0, 100, back, back, 1) == SIEVE_OK);
  CHECK(back[99] == 99.5f && back[98] == 0.0f && back[3] == 3.5f);
  CHECK(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 0, NULL, NULL, 1) == SIEVE_OK); /* span 0 */

  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept, 3, 0, 100, buffer, compact, 1),
               SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 100, buffer, compact, 0),
               SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 90, 11, buffer, compact, 1), SIEVE_ERR_RANGE);
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, 101, 4, 0, 100, buffer, compact, 1), SIEVE_ERR_RANGE);
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept + 1, 4, 0, 100, buffer, compact, 1),
               SIEVE_ERR_INVALID_ARGUMENT); /* tile_base says otherwise */
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 100, NULL, compact, 1),
               SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_compact_gather_host(bits, tile_base, 100, kept, 4, 0, 100, back, back + 1, 1),
               SIEVE_ERR_INVALID_ARGUMENT); /* overlapping, not in place */
  expect_error(sieve_compact_scatter_host(bits, tile_base, 100, kept, 4, 0, 100, back + 50, back, 1),
               SIEVE_ERR_INVALID_ARGUMENT);
}

int main(void) {
  uint8_t bits[125];
  uint64_t id = 0, id2 = 0;
  sieve_mask_info_t info;
  sieve_stats_t stats;
  uint64_t starts[2] = {10, 100};
  uint64_t lengths[2] = {20, 50};
  uint64_t overlap_starts[2] = {10, 25};
  int code;

  CHECK(strlen(sieve_version()) > 0);
  CHECK(strcmp(sieve_version(), SIEVE_VERSION_STRING) == 0); /* header and library from one version */
  /* the commit (12 hex digits, "-dirty" with local changes) or src- and a hash of the sources */
  CHECK(strlen(sieve_build_id()) >= 12);
  CHECK(sieve_dtype_size(SIEVE_DTYPE_F32) == 4);
  CHECK(sieve_dtype_size(SIEVE_DTYPE_BF16) == 2);
  CHECK(sieve_dtype_size(SIEVE_DTYPE_F64) == 8);
  CHECK(sieve_dtype_size(99) == 0);
  for (code = SIEVE_ERR_INTERNAL; code <= SIEVE_OK; ++code)
    CHECK(strcmp(sieve_strerror(code), "unknown error code") != 0);
  CHECK(strcmp(sieve_strerror(-1000), "unknown error code") == 0);

  /* A bitmap mask: every third element kept. */
  memset(bits, 0, sizeof bits);
  for (code = 0; code < 1000; code += 3) bits[code / 8] |= (uint8_t)(1u << (code % 8));
  CHECK(sieve_mask_publish(weights, 1000, SIEVE_DTYPE_F32, bits, &id) == SIEVE_OK);
  CHECK(id != 0);
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  CHECK(sieve_mask_query(weights, &info) == SIEVE_OK);
  CHECK(info.mask_id == id && info.count == 1000 && info.kept == 334 && info.dtype == SIEVE_DTYPE_F32);

  /* Publishing again replaces: same base, new id, new contents. */
  CHECK(sieve_mask_publish_ranges(weights, 1000, SIEVE_DTYPE_F32, starts, lengths, 2, &id2) == SIEVE_OK);
  CHECK(id2 != 0 && id2 != id);
  CHECK(sieve_mask_query(weights, &info) == SIEVE_OK);
  CHECK(info.mask_id == id2 && info.kept == 70);

  /* Bad input: a negative code, a message, nothing stored. */
  expect_error(sieve_mask_publish(NULL, 10, SIEVE_DTYPE_F32, bits, &id), SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_mask_publish(other, 0, SIEVE_DTYPE_F32, bits, &id), SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_mask_publish(other, 64, 42, bits, &id), SIEVE_ERR_UNKNOWN_DTYPE);
  expect_error(sieve_mask_publish(other, 64, SIEVE_DTYPE_F32, NULL, &id), SIEVE_ERR_INVALID_ARGUMENT);
  /* Bits with a length: a short array is refused, never read past its end. */
  expect_error(sieve_mask_publish_for(NULL, other, 64, SIEVE_DTYPE_F32, bits, 7, &id), SIEVE_ERR_RANGE);
  expect_error(sieve_mask_publish_for(NULL, other, 57, SIEVE_DTYPE_F32, bits, 7, &id), SIEVE_ERR_RANGE);
  expect_error(sieve_collective_mask_publish_for(NULL, SIEVE_COLLECTIVE_ALL_GATHER, 64, SIEVE_DTYPE_F32, bits, 0, NULL),
               SIEVE_ERR_RANGE);
  CHECK(sieve_mask_query(other, &info) == SIEVE_ERR_NOT_FOUND); /* nothing stored */
  CHECK(sieve_mask_publish_for(NULL, other, 56, SIEVE_DTYPE_F32, bits, 7, &id) == SIEVE_OK);
  CHECK(sieve_mask_retract(other) == SIEVE_OK);
  expect_error(sieve_mask_publish_ranges(other, 64, SIEVE_DTYPE_F32, starts, lengths, 2, &id), SIEVE_ERR_RANGE);
  expect_error(sieve_mask_publish_ranges(other, 1000, SIEVE_DTYPE_F32, overlap_starts, lengths, 2, &id),
               SIEVE_ERR_RANGE);
  expect_error(sieve_mask_publish_ranges(other, 64, SIEVE_DTYPE_F32, NULL, lengths, 2, &id),
               SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_mask_publish_file(other, 64, SIEVE_DTYPE_F32, "/nonexistent/mask.safetensors", &id), SIEVE_ERR_IO);
  expect_error(sieve_mask_publish_file(other, 64, SIEVE_DTYPE_F32, NULL, &id), SIEVE_ERR_INVALID_ARGUMENT);
  expect_error(sieve_mask_query(other, &info), SIEVE_ERR_NOT_FOUND);
  expect_error(sieve_mask_query(weights, NULL), SIEVE_ERR_INVALID_ARGUMENT);

  /* Counts whose bitmap or buffer cannot exist are refused before any size is computed (they used to
   * overflow Mask::from_bitmap's size and write past a heap buffer). */
  expect_error(sieve_mask_publish(other, (size_t)-1, SIEVE_DTYPE_F32, bits, &id), SIEVE_ERR_RANGE);
  expect_error(sieve_mask_publish(other, (size_t)-1 / 4 + 1, SIEVE_DTYPE_F32, bits, &id), SIEVE_ERR_RANGE);
  expect_error(sieve_mask_publish((void*)(~(uintptr_t)0 - 8), 64, SIEVE_DTYPE_F32, bits, &id), SIEVE_ERR_RANGE);
  CHECK(strstr(sieve_last_error(), "elements at 0xfffffffffffffff7 do not fit") != NULL); /* hex, as maps show */
  expect_error(sieve_mask_publish_ranges(other, (size_t)-1, SIEVE_DTYPE_F64, starts, lengths, 2, &id), SIEVE_ERR_RANGE);
  {
    uint64_t huge_start = UINT64_MAX - 4, huge_length = 10;
    expect_error(sieve_mask_publish_ranges(other, 64, SIEVE_DTYPE_F32, &huge_start, &huge_length, 1, &id),
                 SIEVE_ERR_RANGE);
  }

  /* Every dtype reads back as published, not as the first dtype of its width (BF16 was F16). */
  {
    static uint64_t wide[64];
    static const int dtypes[] = {SIEVE_DTYPE_F32, SIEVE_DTYPE_F16, SIEVE_DTYPE_BF16, SIEVE_DTYPE_F64,
                                 SIEVE_DTYPE_I8,  SIEVE_DTYPE_U8,  SIEVE_DTYPE_I32,  SIEVE_DTYPE_I64};
    size_t i;
    for (i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i) {
      CHECK(sieve_mask_publish(wide, 64, dtypes[i], bits, NULL) == SIEVE_OK);
      CHECK(sieve_mask_query(wide, &info) == SIEVE_OK && info.dtype == dtypes[i]);
    }
    /* Retract by id: a stale id (replaced since) is NOT_FOUND and leaves the newer mask alone. */
    CHECK(sieve_mask_publish(wide, 64, SIEVE_DTYPE_F32, bits, &id) == SIEVE_OK);
    CHECK(sieve_mask_publish(wide, 64, SIEVE_DTYPE_F32, bits, &id2) == SIEVE_OK);
    expect_error(sieve_mask_retract_id(id), SIEVE_ERR_NOT_FOUND);
    CHECK(sieve_mask_query(wide, &info) == SIEVE_OK && info.mask_id == id2);
    CHECK(sieve_mask_retract_id(id2) == SIEVE_OK);
    expect_error(sieve_mask_query(wide, &info), SIEVE_ERR_NOT_FOUND);
  }

  /* Masks of collectives (FSDP's fresh buffers): staged like any other, retracted by id. */
  {
    uint64_t collective_id = 0;
    CHECK(sieve_collective_mask_publish(SIEVE_COLLECTIVE_REDUCE_SCATTER, 64, SIEVE_DTYPE_BF16, bits, &collective_id) ==
          SIEVE_OK);
    CHECK(sieve_collective_mask_publish(SIEVE_COLLECTIVE_ALL_GATHER, 64, SIEVE_DTYPE_F32, bits, NULL) == SIEVE_OK);
    expect_error(sieve_collective_mask_publish(3, 64, SIEVE_DTYPE_F32, bits, NULL), SIEVE_ERR_INVALID_ARGUMENT);
    expect_error(sieve_collective_mask_publish(SIEVE_COLLECTIVE_ALL_GATHER, 0, SIEVE_DTYPE_F32, bits, NULL),
                 SIEVE_ERR_INVALID_ARGUMENT);
    expect_error(sieve_collective_mask_publish(SIEVE_COLLECTIVE_ALL_GATHER, 64, 99, bits, NULL),
                 SIEVE_ERR_UNKNOWN_DTYPE);
    expect_error(sieve_collective_mask_publish(SIEVE_COLLECTIVE_ALL_GATHER, 64, SIEVE_DTYPE_F32, NULL, NULL),
                 SIEVE_ERR_INVALID_ARGUMENT);
    expect_error(
        sieve_collective_mask_publish(SIEVE_COLLECTIVE_ALL_GATHER, (size_t)1 << 62, SIEVE_DTYPE_F64, bits, NULL),
        SIEVE_ERR_RANGE);
    memset(&stats, 0, sizeof stats);
    stats.size = sizeof stats;
    CHECK(sieve_stats_get(&stats) == SIEVE_OK && stats.masks_published == 3);
    CHECK(sieve_mask_retract_id(collective_id) == SIEVE_OK);
    CHECK(sieve_mask_retract_id(collective_id + 1) == SIEVE_OK);
  }

  /* Masks for one communicator: a short bits array is refused, never read past; scopes
   * never overlap; NULL is every communicator, as the unscoped entry points. */
  {
    static float scoped[64];
    int comm_a = 0, comm_b = 0; /* stand-ins for two ncclComm_t handles: only compared */
    uint64_t scoped_id = 0;
    expect_error(sieve_mask_publish_for(&comm_a, scoped, 64, SIEVE_DTYPE_F32, bits, 7, NULL), SIEVE_ERR_RANGE);
    CHECK(strstr(sieve_last_error(), "64 elements need 8 bytes of bits, 7 given") != NULL);
    expect_error(
        sieve_collective_mask_publish_for(&comm_a, SIEVE_COLLECTIVE_REDUCE_SCATTER, 64, SIEVE_DTYPE_F32, bits, 7, NULL),
        SIEVE_ERR_RANGE);
    CHECK(sieve_mask_publish_for(&comm_a, scoped, 64, SIEVE_DTYPE_F32, bits, 8, &scoped_id) == SIEVE_OK);
    expect_error(sieve_mask_publish_for(&comm_b, scoped + 8, 8, SIEVE_DTYPE_F32, bits, 1, NULL), SIEVE_ERR_RANGE);
    expect_error(sieve_mask_publish(scoped, 64, SIEVE_DTYPE_F32, bits, NULL), SIEVE_ERR_RANGE);
    CHECK(sieve_mask_query(scoped, &info) == SIEVE_OK && info.mask_id == scoped_id);
    CHECK(sieve_mask_publish_ranges_for(&comm_a, scoped, 64, SIEVE_DTYPE_F32, starts, lengths, 1, &id) == SIEVE_OK);
    CHECK(sieve_mask_retract_id(id) == SIEVE_OK);
    CHECK(sieve_collective_mask_publish_for(NULL, SIEVE_COLLECTIVE_ALL_GATHER, 64, SIEVE_DTYPE_F32, bits, 8, &id) ==
          SIEVE_OK);
    CHECK(sieve_mask_retract_id(id) == SIEVE_OK);
  }

  /* A retracted mask is released once no agreed table holds it (none here: no commit ran). */
  {
    static float staged[64];
    int released = -1;
    CHECK(sieve_mask_publish(staged, 64, SIEVE_DTYPE_F32, bits, &id) == SIEVE_OK);
    CHECK(sieve_mask_released(id, &released) == SIEVE_OK && released == 0);
    CHECK(sieve_mask_retract_id(id) == SIEVE_OK);
    CHECK(sieve_mask_released(id, &released) == SIEVE_OK && released == 1);
    expect_error(sieve_mask_released(id + 1000, &released), SIEVE_ERR_NOT_FOUND);
    expect_error(sieve_mask_released(id, NULL), SIEVE_ERR_INVALID_ARGUMENT);
  }

  /* Commits are collectives on a communicator: bad arguments are refused before anything is issued,
   * and without a reachable NCCL (none is loaded here) the proxy is unavailable. */
  {
    sieve_commit_result_t result;
    static int64_t token[SIEVE_COMMIT_TOKEN_WORDS];
    int not_a_comm = 0, with_proxy = 0;
    memset(&result, 0, sizeof result);
    result.size = sizeof result;
    expect_error(sieve_comm_commit(NULL, NULL, 0, &result), SIEVE_ERR_INVALID_ARGUMENT);
    expect_error(sieve_comm_commit(&not_a_comm, NULL, 0x80, &result), SIEVE_ERR_INVALID_ARGUMENT);
    result.size = 0;
    expect_error(sieve_comm_commit(&not_a_comm, NULL, 0, &result), SIEVE_ERR_INVALID_ARGUMENT);
    result.size = sizeof result;
    expect_error(sieve_comm_commit(&not_a_comm, NULL, 0, &result), SIEVE_ERR_UNAVAILABLE);
    /* A CUDA build carries the proxy (and finds no NCCL here); another says it has none. */
    with_proxy = strstr(sieve_last_error(), "no NCCL can be reached") != NULL;
    CHECK(with_proxy || strstr(sieve_last_error(), "built without the collective proxy") != NULL);
#ifdef SIEVE_TEST_PROXY
    CHECK(with_proxy == SIEVE_TEST_PROXY);
#endif
    expect_error(sieve_commit_arm(NULL, 0), SIEVE_ERR_INVALID_ARGUMENT);
    expect_error(sieve_commit_arm(token, 0x80), SIEVE_ERR_INVALID_ARGUMENT);
    if (with_proxy) CHECK(sieve_commit_arm(token, SIEVE_COMMIT_UNION) == SIEVE_OK);
    else expect_error(sieve_commit_arm(token, 0), SIEVE_ERR_UNAVAILABLE);
    /* Armed, but no all-reduce of the token reached the proxy: nothing was decided. */
    expect_error(sieve_commit_outcome(token, &result), SIEVE_ERR_NOT_FOUND);
    CHECK(strstr(sieve_last_error(), "every rank refused it") != NULL);
  }

  check_host_compaction();

  memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  CHECK(sieve_stats_get(&stats) == SIEVE_OK);
  CHECK(stats.size == sizeof stats);
  CHECK(stats.masks_published == 1);
  /* An older caller with a shorter struct gets only what fits. */
  {
    unsigned char old[sizeof(size_t) + 2 * sizeof(uint64_t) + 8];
    size_t old_size = sizeof(size_t) + 2 * sizeof(uint64_t);
    memset(old, 0xEE, sizeof old);
    memcpy(old, &old_size, sizeof old_size);
    CHECK(sieve_stats_get((sieve_stats_t*)(void*)old) == SIEVE_OK);
    CHECK(old[old_size] == 0xEE && old[sizeof old - 1] == 0xEE);
  }
  expect_error(sieve_stats_get(NULL), SIEVE_ERR_INVALID_ARGUMENT);
  stats.size = 0;
  expect_error(sieve_stats_get(&stats), SIEVE_ERR_INVALID_ARGUMENT);
  /* The message says what was given and what is accepted: shorter structs of older headers are. */
  CHECK(strstr(sieve_last_error(), "out->size is 0: set it to sizeof(sieve_stats_t)") != NULL);
  stats.size = sizeof(size_t) + sizeof(uint64_t); /* an older header's struct: one counter */
  CHECK(sieve_stats_get(&stats) == SIEVE_OK);

  CHECK(sieve_mask_retract(weights) == SIEVE_OK);
  expect_error(sieve_mask_retract(weights), SIEVE_ERR_NOT_FOUND);
  expect_error(sieve_mask_retract(NULL), SIEVE_ERR_INVALID_ARGUMENT);
  stats.size = sizeof stats;
  CHECK(sieve_stats_get(&stats) == SIEVE_OK && stats.masks_published == 0);

  if (failures) {
    fprintf(stderr, "c_api_test: %d checks failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed (sieve %s)\n", sieve_version());
  return 0;
}
