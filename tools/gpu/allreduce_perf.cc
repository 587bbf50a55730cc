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

struct Args {
  int nranks = 0;
  std::string id_file;
  size_t min_bytes = size_t(1) << 20, max_bytes = size_t(1) << 30;
  int factor = 4;
  double time_limit_s = 0;  // 0: no limit
};

// The command line; --rank goes to g_rank, which every failure line names.
Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--rank") g_rank = std::atoi(next().c_str());
    else if (a == "--nranks") args.nranks = std::atoi(next().c_str());
    else if (a == "--id-file") args.id_file = next();
    else if (a == "--min-bytes") args.min_bytes = sieve::tools::gpu::size_option(a, next());
    else if (a == "--max-bytes") args.max_bytes = sieve::tools::gpu::size_option(a, next());
    else if (a == "--factor") args.factor = std::atoi(next().c_str());
    else if (a == "--time-limit") args.time_limit_s = std::atof(next().c_str());
    else fail("unknown argument %s", a.c_str());
  }
  if (args.id_file.empty() || args.nranks < 1 || g_rank < 0 || g_rank >= args.nranks || args.factor < 2 ||
      args.min_bytes > args.max_bytes)
    fail(
        "usage: sieve-allreduce-perf --rank R --nranks N --id-file F [--min-bytes 1M] [--max-bytes 1G] "
        "[--factor 4] [--time-limit SECONDS]");
  return args;
}

// The communicator and what every size's timing uses.
struct Bench {
  int nranks = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float *send = nullptr, *recv = nullptr;
  int* verdict = nullptr;  // rank 0's "go on" decision, broadcast before each size
  cudaEvent_t begin = nullptr, end = nullptr;
};

// The communicator first, on device 0 (the current device until one is set): when NCCL cannot
// work here, its own warning is what this program leaves (the GPU kit's NCCL canary reports it).
// Rank 0 then says which NCCL runs over which net.
Bench set_up(const Args& args) {
  Bench b;
  b.nranks = args.nranks;
  ncclUniqueId id;
  const std::string error = sieve::tools::gpu::exchange_unique_id(g_rank, args.id_file, 120, &id);
  if (!error.empty()) fail("%s", error.c_str());
  CHECK_NCCL(ncclCommInitRank(&b.comm, args.nranks, id, g_rank));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  if (g_rank == 0) {
    const char* net = std::getenv("NCCL_NET");
    print_json_line([&](sieve::tools::JsonWriter& json) {
      json.member("nccl_version", std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                                      std::to_string(version % 100));
      json.member("nranks", args.nranks);
      json.member("nccl_net", net ? net : "");
    });
  }
  CHECK_CUDA(cudaMalloc(&b.send, args.max_bytes));
  CHECK_CUDA(cudaMalloc(&b.recv, args.max_bytes));
  CHECK_CUDA(cudaMalloc(&b.verdict, sizeof(int)));
  fill(b.send, args.max_bytes / sizeof(float), g_rank);
  CHECK_CUDA(cudaEventCreate(&b.begin));
  CHECK_CUDA(cudaEventCreate(&b.end));
  return b;
}

// Whether `bytes` is measured: rank 0 predicts it from the last size (time grows at most linearly
// with bytes, with a margin) against --time-limit, and every rank follows its decision.
bool size_fits(const Bench& b, double time_limit_s, double elapsed_s, size_t bytes, double last_call_s,
               size_t last_bytes) {
  int go_on = 1;
  if (g_rank == 0 && time_limit_s > 0 && last_bytes > 0) {
    const double per_call = last_call_s * double(bytes) / double(last_bytes);
    const double predicted = 2.0 * per_call * (warmup_calls(bytes) + timed_calls(bytes)) + 2.0;
    go_on = elapsed_s + predicted < time_limit_s;
  }
  CHECK_CUDA(cudaMemcpy(b.verdict, &go_on, sizeof go_on, cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclBroadcast(b.verdict, b.verdict, 1, ncclInt32, 0, b.comm, b.stream));
  CHECK_CUDA(cudaMemcpyAsync(&go_on, b.verdict, sizeof go_on, cudaMemcpyDeviceToHost, b.stream));
  CHECK_CUDA(cudaStreamSynchronize(b.stream));
  return go_on != 0;
}

// Seconds per all-reduce of `count` floats, after the warm-up calls.
double time_all_reduce(const Bench& b, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  for (int i = 0; i < warmup_calls(bytes); ++i)
    CHECK_NCCL(ncclAllReduce(b.send, b.recv, count, ncclFloat32, ncclSum, b.comm, b.stream));
  const int calls = timed_calls(bytes);
  CHECK_CUDA(cudaEventRecord(b.begin, b.stream));
  for (int i = 0; i < calls; ++i)
    CHECK_NCCL(ncclAllReduce(b.send, b.recv, count, ncclFloat32, ncclSum, b.comm, b.stream));
  CHECK_CUDA(cudaEventRecord(b.end, b.stream));
  CHECK_CUDA(cudaEventSynchronize(b.end));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, b.begin, b.end));
  return double(ms) / 1e3 / calls;
}

// Rank 0's record of one size, nccl-tests' figures.
void print_size(int nranks, size_t bytes, double call_s, long long wrong) {
  const double algbw = double(bytes) / call_s / 1e9;
  const double busbw = algbw * 2.0 * double(nranks - 1) / double(nranks);
  print_json_line([&](sieve::tools::JsonWriter& json) {
    json.member("bytes", uint64_t(bytes));
    json.member("count", uint64_t(bytes / sizeof(float)));
    json.member("dtype", "f32");
    json.member("op", "sum");
    json.member("nranks", nranks);
    json.member("calls", timed_calls(bytes));
    json.member("time_us", sieve::tools::rounded(call_s * 1e6, 1));
    json.member("algbw_GBps", sieve::tools::rounded(algbw, 3));
    json.member("busbw_GBps", sieve::tools::rounded(busbw, 3));
    json.member("correct", wrong < 0);
    if (wrong >= 0) json.member("first_wrong_element", int64_t(wrong));
  });
}

}  // namespace

int main(int argc, char** argv) {
  sieve::tools::gpu::set_fail_context("sieve-allreduce-perf", &g_rank);
  const Args args = parse_args(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  const Bench b = set_up(args);
  double last_call_s = 0;
  size_t last_bytes = 0;
  bool any_wrong = false;
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= size_t(args.factor)) {
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!size_fits(b, args.time_limit_s, elapsed_s, bytes, last_call_s, last_bytes)) {
      if (g_rank == 0)
        print_json_line([&](sieve::tools::JsonWriter& json) {
          json.member("stopped_before_bytes", uint64_t(bytes));
          json.member("reason",
                      "--time-limit " + std::to_string(std::lround(args.time_limit_s)) + " s would be exceeded");
        });
      break;
    }
    const double call_s = time_all_reduce(b, bytes);
    const long long wrong = first_wrong(b.recv, bytes / sizeof(float), args.nranks);
    if (g_rank == 0) print_size(args.nranks, bytes, call_s, wrong);
    if (wrong >= 0) {
      std::fprintf(stderr, "rank %d: wrong sum at element %lld of %zu bytes\n", g_rank, wrong, bytes);
      any_wrong = true;
    }
    last_call_s = call_s;
    last_bytes = bytes;
    if (bytes > args.max_bytes / size_t(args.factor)) break;  // the next size would overflow or pass the maximum
  }
  CHECK_NCCL(ncclCommDestroy(b.comm));
  cudaFree(b.send);
  cudaFree(b.recv);
  cudaFree(b.verdict);
  return any_wrong ? 1 : 0;
}
