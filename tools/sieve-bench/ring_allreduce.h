// SPDX-License-Identifier: Apache-2.0
// Ring all-reduce as NCCL runs it: the buffer in N slices; N-1 reduce-scatter steps then N-1
// all-gather steps; each step's slice goes out in chunks with several in flight, and chunk c of
// step s+1 leaves as soon as chunk c of step s has arrived (and been reduced) — the pipeline that
// keeps the link busy. Ring reduce-scatter and ring all-gather (FSDP's collectives) are its two
// halves on their own, with NCCL's slice order. The transport is abstract so tests can run it over
// in-process fake links.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "tools/sieve-bench/dtype.h"

namespace sieve::bench {

// One node's two ring connections: sends go to the next node, receives come from the previous.
// Messages on each direction match in posting order. Every call returns "" or an error text.
class RingLink {
 public:
  virtual ~RingLink() = default;
  // `*request` stays null when the transport cannot take the request now (call again later).
  virtual std::string post_send(const void* data, size_t bytes, void** request) = 0;
  virtual std::string post_recv(void* data, size_t bytes, void** request) = 0;
  // On done, `*bytes` is the size the sender sent; the request is then released.
  virtual std::string test(void* request, bool* done, size_t* bytes) = 0;
};

struct RingOptions {
  size_t chunk_bytes = 512 << 10;  // NCCL's 4 MiB buffer / 8 steps
  int max_inflight = 8;            // per direction
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct RingResult {
  std::string error;      // empty on success
  size_t bytes_sent = 0;  // logical bytes handed to post_send
};

// Sums `count` elements of `type` in `buffer` across the ring, in place. `scratch` must hold
// max_inflight chunks (scratch_bytes(options)); it is the landing zone of reduce-scatter chunks.
RingResult ring_allreduce(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type, void* scratch,
                          const RingOptions& options);

// Reduce-scatter in place, in NCCL's in-place layout: `buffer` holds N shards of count / N
// elements (count a multiple of N); rank r ends with the sum of shard r at buffer + r * count / N
// (the other shards are left holding partial sums). `scratch` as for ring_allreduce.
RingResult ring_reduce_scatter(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type,
                               void* scratch, const RingOptions& options);

// All-gather in place: rank r's shard of count / N elements at buffer + r * count / N (count a
// multiple of N); every rank ends with every shard.
RingResult ring_all_gather(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type,
                           const RingOptions& options);

inline size_t scratch_bytes(const RingOptions& options) {
  return options.chunk_bytes * static_cast<size_t>(options.max_inflight);
}

}  // namespace sieve::bench
