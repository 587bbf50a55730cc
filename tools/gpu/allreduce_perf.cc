// SPDX-License-Identifier: Apache-2.0
// sieve-allreduce-perf: one rank of a plain NCCL all-reduce benchmark, measured the way nccl-tests
// measures it (out of place, f32 sum, time per call averaged over a fixed number of calls, algorithm
// bandwidth = bytes / time, bus bandwidth = algorithm bandwidth x 2(n-1)/n), with the result checked.
// It never touches Sieve itself: which transport carries the bytes is NCCL's choice, set through
// NCCL_NET (and NCCL_NET_PLUGIN), so the same program compares the Sieve net plugin with NCCL's own
// socket transport. Several ranks share one GPU when each has its own NCCL_HOSTID.
//
//   sieve-allreduce-perf --rank R --nranks N --id-file F [--min-bytes 1M] [--max-bytes 1G]
//                        [--factor 4] [--time-limit SECONDS]
// Rank 0 prints one JSON line with NCCL's version, then one per size. --time-limit stops before a
// size that would not finish in time: rank 0 decides and broadcasts it, so every rank stops at the
// same size (a rank-local decision would leave the others waiting in a collective).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/gpu/check_status.h"
#include "tools/gpu/cli.h"
#include "tools/gpu/unique_id_file.h"

namespace {

int g_rank = 0;

using sieve::tools::gpu::fail;
using sieve::tools::gpu::print_json_line;

// Calls per size, fixed by the size alone so every rank makes the same number of calls.
int warmup_calls(size_t bytes) { return bytes <= (size_t(64) << 20) ? 2 : 1; }
int timed_calls(size_t bytes) {
  if (bytes <= (size_t(16) << 20)) return 20;
  if (bytes <= (size_t(64) << 20)) return 10;
  if (bytes <= (size_t(256) << 20)) return 5;
  return 3;
}

// Element i of rank r holds (r + 1) + i % 7: small integers, so the f32 sum is exact and the
// expected value n(n+1)/2 + n * (i % 7) is known on every rank.
constexpr size_t kChunk = size_t(4) << 20;  // elements moved between host and device at a time

void fill(float* device, size_t count, int rank) {
  std::vector<float> host(std::min(count, kChunk));
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t n = std::min(kChunk, count - base);
    for (size_t i = 0; i < n; ++i) host[i] = float(rank + 1) + float((base + i) % 7);
    CHECK_CUDA(cudaMemcpy(device + base, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
}

// The first wrong element's index, or -1 when every element is right.
long long first_wrong(const float* device, size_t count, int nranks) {
  std::vector<float> host(std::min(count, kChunk));
  const float base_sum = float(nranks) * float(nranks + 1) / 2.0f;
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t n = std::min(kChunk, count - base);
    CHECK_CUDA(cudaMemcpy(host.data(), device + base, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i)
      if (host[i] != base_sum + float(nranks) * float((base + i) % 7)) return (long long)(base + i);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  sieve::tools::gpu::set_fail_context("sieve-allreduce-perf", &g_rank);
  int nranks = 0;
  std::string id_file;
  size_t min_bytes = size_t(1) << 20, max_bytes = size_t(1) << 30;
  int factor = 4;
  double time_limit_s = 0;  // 0: no limit
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--rank") g_rank = std::atoi(next().c_str());
    else if (a == "--nranks") nranks = std::atoi(next().c_str());
    else if (a == "--id-file") id_file = next();
    else if (a == "--min-bytes") min_bytes = sieve::tools::gpu::size_option(a, next());
    else if (a == "--max-bytes") max_bytes = sieve::tools::gpu::size_option(a, next());
    else if (a == "--factor") factor = std::atoi(next().c_str());
    else if (a == "--time-limit") time_limit_s = std::atof(next().c_str());
    else fail("unknown argument %s", a.c_str());
  }
  if (id_file.empty() || nranks < 1 || g_rank < 0 || g_rank >= nranks || factor < 2 || min_bytes > max_bytes)
    fail(
        "usage: sieve-allreduce-perf --rank R --nranks N --id-file F [--min-bytes 1M] [--max-bytes 1G] "
        "[--factor 4] [--time-limit SECONDS]");
  const auto start = std::chrono::steady_clock::now();

  // The communicator first, on device 0 (the current device until one is set): when NCCL cannot
  // work here, its own warning is what this program leaves (the GPU kit's NCCL canary reports it).
  ncclUniqueId id;
  const std::string error = sieve::tools::gpu::exchange_unique_id(g_rank, id_file, 120, &id);
  if (!error.empty()) fail("%s", error.c_str());
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, g_rank));
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  if (g_rank == 0) {
    const char* net = std::getenv("NCCL_NET");
    print_json_line([&](sieve::tools::JsonWriter& json) {
      json.member("nccl_version", std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                                      std::to_string(version % 100));
      json.member("nranks", nranks);
      json.member("nccl_net", net ? net : "");
    });
  }

  float *send, *recv;
  int* verdict;  // rank 0's "go on" decision, broadcast before each size
  CHECK_CUDA(cudaMalloc(&send, max_bytes));
  CHECK_CUDA(cudaMalloc(&recv, max_bytes));
  CHECK_CUDA(cudaMalloc(&verdict, sizeof(int)));
  fill(send, max_bytes / sizeof(float), g_rank);
  cudaEvent_t begin, end;
  CHECK_CUDA(cudaEventCreate(&begin));
  CHECK_CUDA(cudaEventCreate(&end));

  double last_call_s = 0;
  size_t last_bytes = 0;
  bool any_wrong = false;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= size_t(factor)) {
    const size_t count = bytes / sizeof(float);
    int go_on = 1;
    if (g_rank == 0 && time_limit_s > 0 && last_bytes > 0) {
      // Predict this size from the last one (time grows at most linearly with bytes), with a margin.
      const double per_call = last_call_s * double(bytes) / double(last_bytes);
      const double predicted = 2.0 * per_call * (warmup_calls(bytes) + timed_calls(bytes)) + 2.0;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      go_on = elapsed + predicted < time_limit_s;
    }
    CHECK_CUDA(cudaMemcpy(verdict, &go_on, sizeof go_on, cudaMemcpyHostToDevice));
    CHECK_NCCL(ncclBroadcast(verdict, verdict, 1, ncclInt32, 0, comm, stream));
    CHECK_CUDA(cudaMemcpyAsync(&go_on, verdict, sizeof go_on, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (!go_on) {
      if (g_rank == 0)
        print_json_line([&](sieve::tools::JsonWriter& json) {
          json.member("stopped_before_bytes", uint64_t(bytes));
          json.member("reason", "--time-limit " + std::to_string(std::lround(time_limit_s)) + " s would be exceeded");
        });
      break;
    }
    for (int i = 0; i < warmup_calls(bytes); ++i)
      CHECK_NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
    const int calls = timed_calls(bytes);
    CHECK_CUDA(cudaEventRecord(begin, stream));
    for (int i = 0; i < calls; ++i) CHECK_NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
    CHECK_CUDA(cudaEventRecord(end, stream));
    CHECK_CUDA(cudaEventSynchronize(end));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, begin, end));
    const double call_s = double(ms) / 1e3 / calls;
    const long long wrong = first_wrong(recv, count, nranks);
    const double algbw = double(bytes) / call_s / 1e9;
    const double busbw = algbw * 2.0 * double(nranks - 1) / double(nranks);
    if (g_rank == 0) {
      print_json_line([&](sieve::tools::JsonWriter& json) {
        json.member("bytes", uint64_t(bytes));
        json.member("count", uint64_t(count));
        json.member("dtype", "f32");
        json.member("op", "sum");
        json.member("nranks", nranks);
        json.member("calls", calls);
        json.member("time_us", sieve::tools::rounded(call_s * 1e6, 1));
        json.member("algbw_GBps", sieve::tools::rounded(algbw, 3));
        json.member("busbw_GBps", sieve::tools::rounded(busbw, 3));
        json.member("correct", wrong < 0);
        if (wrong >= 0) json.member("first_wrong_element", int64_t(wrong));
      });
    }
    if (wrong >= 0) {
      std::fprintf(stderr, "rank %d: wrong sum at element %lld of %zu bytes\n", g_rank, wrong, bytes);
      any_wrong = true;
    }
    last_call_s = call_s;
    last_bytes = bytes;
    if (bytes > max_bytes / size_t(factor)) break;  // the next size would overflow or pass the maximum
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  cudaFree(send);
  cudaFree(recv);
  cudaFree(verdict);
  return any_wrong ? 1 : 0;
}
