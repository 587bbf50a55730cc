// SPDX-License-Identifier: Apache-2.0
// sieve-proxy-rank: one rank of a multi-process NCCL job on a GPU machine, driving the collective
// proxy the way a trainer does: NCCL linked normally, libnccl-net-sieve.so loaded (NCCL also loads it
// as its net plugin when NCCL_NET_PLUGIN names it), masks published through the C API, and
// all-reduces called through the library's interposed ncclAllReduce. Several ranks share one GPU when
// each has its own NCCL_HOSTID (tools/gpu/run_proxy_bench.sh and tests/plugin/proxy/gpu set that up).
//
//   sieve-proxy-rank --rank R --nranks N --id-file F --library L check     every dtype and op, compact vs dense
//   ... learned                      SIEVE_TRACK=1: learn, compact, violate, fall back
//   ... sharded                      reduce-scatter and all-gather, compacted vs dense, every dtype
//   ... union                        every rank publishes its own mask; SIEVE_COMMIT_UNION
//   ... capture                      a CUDA graph capturing a compacted all-reduce, replayed
//   ... bench [--count E] [--iters K] [--densities 0.5,0.2,0.1]            timings and wire bytes (JSON lines)
// Exit status 0 = every check held; messages name the first difference.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugin/sieve.h"
#include "tools/gpu/check_status.h"
#include "tools/gpu/cli.h"
#include "tools/gpu/unique_id_file.h"

namespace {

int g_rank = 0;

using sieve::tools::gpu::fail;

// The library's entry points, from the loaded copy (the one NCCL also uses as its plugin).
struct Sieve {
  decltype(&::ncclAllReduce) all_reduce;
  decltype(&::ncclReduceScatter) reduce_scatter;
  decltype(&::ncclAllGather) all_gather;
  decltype(&::ncclGroupStart) group_start;
  decltype(&::ncclGroupEnd) group_end;
  decltype(&::sieve_mask_publish) publish;
  decltype(&::sieve_comm_commit) commit;
  decltype(&::sieve_mask_retract) retract;
  decltype(&::sieve_stats_get) stats;
  decltype(&::sieve_last_error) last_error;
};

Sieve load(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) fail("dlopen %s: %s", path.c_str(), dlerror());
  auto sym = [&](const char* name) {
    void* p = dlsym(h, name);
    if (!p) fail("%s has no %s (built without CUDA?)", path.c_str(), name);
    return p;
  };
  Sieve s;
  s.all_reduce = reinterpret_cast<decltype(s.all_reduce)>(sym("ncclAllReduce"));
  s.reduce_scatter = reinterpret_cast<decltype(s.reduce_scatter)>(sym("ncclReduceScatter"));
  s.all_gather = reinterpret_cast<decltype(s.all_gather)>(sym("ncclAllGather"));
  s.commit = reinterpret_cast<decltype(s.commit)>(sym("sieve_comm_commit"));
  s.group_start = reinterpret_cast<decltype(s.group_start)>(sym("ncclGroupStart"));
  s.group_end = reinterpret_cast<decltype(s.group_end)>(sym("ncclGroupEnd"));
  s.publish = reinterpret_cast<decltype(s.publish)>(sym("sieve_mask_publish"));
  s.retract = reinterpret_cast<decltype(s.retract)>(sym("sieve_mask_retract"));
  s.stats = reinterpret_cast<decltype(s.stats)>(sym("sieve_stats_get"));
  s.last_error = reinterpret_cast<decltype(s.last_error)>(sym("sieve_last_error"));
  return s;
}

sieve_stats_t stats(const Sieve& s) {
  sieve_stats_t st;
  std::memset(&st, 0, sizeof st);
  st.size = sizeof st;
  s.stats(&st);
  return st;
}

ncclUniqueId rendezvous(int rank, const std::string& file) {
  ncclUniqueId id;
  const std::string error = sieve::tools::gpu::exchange_unique_id(rank, file, 60, &id);
  if (!error.empty()) fail("%s", error.c_str());
  return id;
}

struct Type {
  ncclDataType_t nccl;
  int sieve;
  size_t size;
  const char* name;
};
const Type kTypes[] = {{ncclFloat32, SIEVE_DTYPE_F32, 4, "f32"},
                       {ncclFloat16, SIEVE_DTYPE_F16, 2, "f16"},
                       {ncclBfloat16, SIEVE_DTYPE_BF16, 2, "bf16"},
                       {ncclFloat64, SIEVE_DTYPE_F64, 8, "f64"}};
const std::pair<ncclRedOp_t, const char*> kOps[] = {
    {ncclSum, "sum"}, {ncclProd, "prod"}, {ncclMax, "max"}, {ncclMin, "min"}, {ncclAvg, "avg"}};

// Bits of v (exactly representable: the test values are small multiples of 0.5) in each type.
uint64_t encode(float v, const Type& t) {
  uint32_t f;
  std::memcpy(&f, &v, 4);
  switch (t.size) {
    case 8: {
      double d = v;
      uint64_t b;
      std::memcpy(&b, &d, 8);
      return b;
    }
    case 4: return f;
    default:
      if (t.nccl == ncclBfloat16) return f >> 16;
      if (v == 0.0f) return (f >> 16) & 0x8000;
      return ((f >> 16) & 0x8000) | ((((f >> 23) & 0xff) - 127 + 15) << 10) | ((f >> 13) & 0x3ff);
  }
}

// A mask at density d: short random gaps and kept runs, so both plan layouts appear across densities.
std::vector<uint8_t> make_mask(size_t count, double density, uint32_t seed, size_t* kept) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint8_t> bits((count + 7) / 8, 0);
  *kept = 0;
  for (size_t i = 0; i < count;) {
    const size_t run = 1 + rng() % 64;
    const bool keep = u(rng) < density;
    for (size_t j = i; j < i + run && j < count; ++j)
      if (keep) bits[j / 8] |= uint8_t(1u << (j % 8)), ++*kept;
    i += run;
  }
  return bits;
}

bool kept_at(const std::vector<uint8_t>& bits, size_t i) { return (bits[i / 8] >> (i % 8)) & 1; }

// Host image of rank r's buffer: small exact values where kept, -0.0 where pruned (as prune leaves).
std::vector<uint8_t> make_data(const std::vector<uint8_t>& mask, size_t count, const Type& t, int rank, int salt) {
  std::vector<uint8_t> data(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    const float v = kept_at(mask, i) ? float((i + rank + salt) % 4 + 2) * 0.5f * ((i + rank) % 3 ? 1.f : -1.f) : -0.0f;
    const uint64_t b = encode(v, t);
    std::memcpy(&data[i * t.size], &b, t.size);
  }
  return data;
}

// Equal bit for bit, except that +0 and -0 are the same zero.
void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const Type& t, const char* what) {
  const uint64_t sign = 1ull << (t.size * 8 - 1);
  for (size_t i = 0; i < got.size() / t.size; ++i) {
    uint64_t a = 0, b = 0;
    std::memcpy(&a, &got[i * t.size], t.size);
    std::memcpy(&b, &want[i * t.size], t.size);
    if (a != b && !((a & ~sign) == 0 && (b & ~sign) == 0))
      fail("%s: element %zu is 0x%llx, dense gives 0x%llx", what, i, (unsigned long long)a, (unsigned long long)b);
  }
}

struct Job {
  Sieve sieve;
  ncclComm_t comm;
  cudaStream_t stream;
  int rank, nranks;
};

std::vector<uint8_t> download(const void* d, size_t bytes, cudaStream_t s) {
  std::vector<uint8_t> h(bytes);
  CHECK_CUDA(cudaMemcpyAsync(h.data(), d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return h;
}

void run_check(Job& job) {
  const size_t count = (1u << 20) + 37;
  for (const Type& t : kTypes) {
    for (double density : {0.2, 0.02}) {
      size_t kept = 0;
      const std::vector<uint8_t> mask = make_mask(count, density, 7 + uint32_t(density * 100), &kept);
      const size_t bytes = count * t.size;
      void *in, *dense, *inplace, *outplace, *group_a, *group_b;
      for (void** p : {&in, &dense, &inplace, &outplace, &group_a, &group_b}) CHECK_CUDA(cudaMalloc(p, bytes));
      for (const auto& [op, op_name] : kOps) {
        const std::vector<uint8_t> data = make_data(mask, count, t, job.rank, int(op));
        CHECK_CUDA(cudaMemcpy(in, data.data(), bytes, cudaMemcpyHostToDevice));
        for (void* p : {inplace, group_a, group_b})
          CHECK_CUDA(cudaMemcpy(p, data.data(), bytes, cudaMemcpyHostToDevice));
        for (void* p : {in, inplace, group_a, group_b})
          if (job.sieve.publish(p, count, t.sieve, mask.data(), nullptr) != 0)
            fail("publish: %s", job.sieve.last_error());
        if (job.sieve.commit(job.comm, job.stream, 0, nullptr) != 0) fail("commit: %s", job.sieve.last_error());
        // Dense reference through the real NCCL (linked directly, not interposed).
        CHECK_NCCL(ncclAllReduce(in, dense, count, t.nccl, op, job.comm, job.stream));
        const sieve_stats_t before = stats(job.sieve);
        CHECK_NCCL(job.sieve.all_reduce(inplace, inplace, count, t.nccl, op, job.comm, job.stream));
        CHECK_NCCL(job.sieve.all_reduce(in, outplace, count, t.nccl, op, job.comm, job.stream));
        CHECK_NCCL(job.sieve.group_start());
        CHECK_NCCL(job.sieve.all_reduce(group_a, group_a, count, t.nccl, op, job.comm, job.stream));
        CHECK_NCCL(job.sieve.all_reduce(group_b, group_b, count, t.nccl, op, job.comm, job.stream));
        CHECK_NCCL(job.sieve.group_end());
        const sieve_stats_t after = stats(job.sieve);
        const std::vector<uint8_t> want = download(dense, bytes, job.stream);
        char what[128];
        std::snprintf(what, sizeof what, "%s %s d=%.2f", t.name, op_name, density);
        expect_same(download(inplace, bytes, job.stream), want, t, (std::string(what) + " in-place").c_str());
        expect_same(download(outplace, bytes, job.stream), want, t, (std::string(what) + " out-of-place").c_str());
        expect_same(download(group_a, bytes, job.stream), want, t, (std::string(what) + " grouped").c_str());
        expect_same(download(group_b, bytes, job.stream), want, t, (std::string(what) + " grouped").c_str());
        if (after.collectives_compacted - before.collectives_compacted != 4)
          fail("%s: %llu of 4 calls compacted", what,
               (unsigned long long)(after.collectives_compacted - before.collectives_compacted));
        for (void* p : {in, inplace, group_a, group_b}) job.sieve.retract(p);
        if (job.rank == 0) std::printf("ok: %s (kept %zu of %zu)\n", what, kept, count);
      }
      for (void* p : {in, dense, inplace, outplace, group_a, group_b}) CHECK_CUDA(cudaFree(p));
    }
  }
}

// Reduce-scatter (mask on the input) and all-gather (mask on the gathered output), as FSDP runs them.
void run_sharded(Job& job) {
  const size_t shard = (1u << 18) + 3, count = shard * size_t(job.nranks);
  for (const Type& t : kTypes) {
    size_t kept = 0;
    const std::vector<uint8_t> mask = make_mask(count, 0.2, 13, &kept);
    const std::vector<uint8_t> data = make_data(mask, count, t, job.rank, 1);
    void *rs_in, *rs_out, *rs_ref, *ag, *ag_ref;
    for (void** p : {&rs_in, &ag, &ag_ref}) CHECK_CUDA(cudaMalloc(p, count * t.size));
    for (void** p : {&rs_out, &rs_ref}) CHECK_CUDA(cudaMalloc(p, shard * t.size));
    CHECK_CUDA(cudaMemcpy(rs_in, data.data(), count * t.size, cudaMemcpyHostToDevice));
    // All-gather in place: this rank's shard of the data, inside the output.
    CHECK_CUDA(cudaMemcpy(ag, data.data(), count * t.size, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ag_ref, data.data(), count * t.size, cudaMemcpyHostToDevice));
    if (job.sieve.publish(rs_in, count, t.sieve, mask.data(), nullptr) != 0 ||
        job.sieve.publish(ag, count, t.sieve, mask.data(), nullptr) != 0 ||
        job.sieve.commit(job.comm, job.stream, 0, nullptr) != 0)
      fail("publish/commit: %s", job.sieve.last_error());
    const size_t mine = size_t(job.rank) * shard * t.size;
    CHECK_NCCL(ncclReduceScatter(rs_in, rs_ref, shard, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_NCCL(ncclAllGather(static_cast<char*>(ag_ref) + mine, ag_ref, shard, t.nccl, job.comm, job.stream));
    const sieve_stats_t before = stats(job.sieve);
    CHECK_NCCL(job.sieve.reduce_scatter(rs_in, rs_out, shard, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_NCCL(job.sieve.all_gather(static_cast<char*>(ag) + mine, ag, shard, t.nccl, job.comm, job.stream));
    const sieve_stats_t after = stats(job.sieve);
    expect_same(download(rs_out, shard * t.size, job.stream), download(rs_ref, shard * t.size, job.stream), t,
                "reduce-scatter");
    expect_same(download(ag, count * t.size, job.stream), download(ag_ref, count * t.size, job.stream), t,
                "all-gather");
    if (after.collectives_compacted - before.collectives_compacted != 2) fail("%s: not both compacted", t.name);
    job.sieve.retract(rs_in);
    job.sieve.retract(ag);
    for (void* p : {rs_in, rs_out, rs_ref, ag, ag_ref}) CHECK_CUDA(cudaFree(p));
    if (job.rank == 0) std::printf("ok: sharded %s (kept %zu of %zu)\n", t.name, kept, count);
  }
}

// Union masks: every rank publishes its own mask; the commit ORs them; results equal dense.
void run_union(Job& job) {
  const Type& t = kTypes[0];
  const size_t count = (1u << 20) + 1;
  size_t kept = 0;
  const std::vector<uint8_t> mask = make_mask(count, 0.1, 100 + uint32_t(job.rank), &kept);
  const std::vector<uint8_t> data = make_data(mask, count, t, job.rank, 3);
  void *buf, *ref;
  CHECK_CUDA(cudaMalloc(&buf, count * 4));
  CHECK_CUDA(cudaMalloc(&ref, count * 4));
  CHECK_CUDA(cudaMemcpy(buf, data.data(), count * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(ref, data.data(), count * 4, cudaMemcpyHostToDevice));
  if (job.sieve.publish(buf, count, t.sieve, mask.data(), nullptr) != 0 ||
      job.sieve.commit(job.comm, job.stream, SIEVE_COMMIT_UNION, nullptr) != 0)
    fail("publish/commit: %s", job.sieve.last_error());
  CHECK_NCCL(ncclAllReduce(ref, ref, count, t.nccl, ncclSum, job.comm, job.stream));
  CHECK_NCCL(job.sieve.all_reduce(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));
  expect_same(download(buf, count * 4, job.stream), download(ref, count * 4, job.stream), t, "union");
  if (stats(job.sieve).collectives_compacted == 0) fail("union: nothing compacted");
  job.sieve.retract(buf);
  if (job.rank == 0) std::printf("ok: union of masks\n");
}

// A CUDA graph that captures a compacted all-reduce, replayed three times on fresh data.
void run_capture(Job& job) {
  const Type& t = kTypes[0];
  const size_t count = (1u << 20) + 5;
  size_t kept = 0;
  const std::vector<uint8_t> mask = make_mask(count, 0.2, 21, &kept);
  void *buf, *ref;
  CHECK_CUDA(cudaMalloc(&buf, count * 4));
  CHECK_CUDA(cudaMalloc(&ref, count * 4));
  if (job.sieve.publish(buf, count, t.sieve, mask.data(), nullptr) != 0 ||
      job.sieve.commit(job.comm, job.stream, 0, nullptr) != 0)
    fail("publish/commit: %s", job.sieve.last_error());
  CHECK_NCCL(job.sieve.all_reduce(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));  // the vote
  CHECK_CUDA(cudaStreamSynchronize(job.stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(job.stream, cudaStreamCaptureModeThreadLocal));
  CHECK_NCCL(job.sieve.all_reduce(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));
  CHECK_CUDA(cudaStreamEndCapture(job.stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    const std::vector<uint8_t> data = make_data(mask, count, t, job.rank, 10 + replay);
    CHECK_CUDA(cudaMemcpy(buf, data.data(), count * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ref, data.data(), count * 4, cudaMemcpyHostToDevice));
    CHECK_NCCL(ncclAllReduce(ref, ref, count, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_CUDA(cudaGraphLaunch(exec, job.stream));
    expect_same(download(buf, count * 4, job.stream), download(ref, count * 4, job.stream), t, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  job.sieve.retract(buf);
  if (job.rank == 0) std::printf("ok: captured compacted all-reduce, 3 replays\n");
}

void run_learned(Job& job) {
  const Type& t = kTypes[0];
  const size_t count = 1u << 20;
  size_t kept = 0;
  const std::vector<uint8_t> mask = make_mask(count, 0.1, 11, &kept);
  void *buf, *ref;
  CHECK_CUDA(cudaMalloc(&buf, count * 4));
  CHECK_CUDA(cudaMalloc(&ref, count * 4));
  const int steps = 30, violating = 15;
  uint64_t compacted_before_violation = 0;
  // Learning starts at a commit (nothing published): its vote compares every rank's SIEVE_TRACK*.
  if (job.sieve.commit(job.comm, job.stream, 0, nullptr) != 0) fail("commit: %s", job.sieve.last_error());
  for (int step = 0; step < steps; ++step) {
    std::vector<uint8_t> data = make_data(mask, count, t, job.rank, step);
    if (step == violating && job.rank == 1) {  // a nonzero where every earlier output was zero
      size_t i = 0;
      while (kept_at(mask, i)) ++i;
      const uint64_t b = encode(3.0f, t);
      std::memcpy(&data[i * 4], &b, 4);
    }
    CHECK_CUDA(cudaStreamSynchronize(job.stream));
    CHECK_CUDA(cudaMemcpy(buf, data.data(), count * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ref, data.data(), count * 4, cudaMemcpyHostToDevice));
    CHECK_NCCL(ncclAllReduce(ref, ref, count, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_NCCL(job.sieve.all_reduce(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));
    // Outputs equal the dense ones except at violating positions of compact calls (documented: dropped).
    if (step != violating)
      expect_same(download(buf, count * 4, job.stream), download(ref, count * 4, job.stream), t, "learned");
    if (step == violating - 1) compacted_before_violation = stats(job.sieve).collectives_compacted;
  }
  const sieve_stats_t st = stats(job.sieve);
  if (compacted_before_violation == 0) fail("learned: never compacted before the violation");
  if (job.rank == 1 && st.mask_violations == 0) fail("learned: the violation was not counted");
  std::printf("ok: rank %d learned: compacted %llu of %d calls, violations counted %llu\n", job.rank,
              (unsigned long long)st.collectives_compacted, steps, (unsigned long long)st.mask_violations);
}

void run_bench(Job& job, size_t count, int iters, const std::vector<double>& densities) {
  const Type& t = kTypes[0];
  void* buf;
  CHECK_CUDA(cudaMalloc(&buf, count * 4));
  CHECK_CUDA(cudaMemset(buf, 0, count * 4));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  auto time_calls = [&](bool proxied, double* wire_bytes) {
    const sieve_stats_t before = stats(job.sieve);
    for (int i = 0; i < 3; ++i)  // warm-up (the commit already voted)
      CHECK_NCCL(
          (proxied ? job.sieve.all_reduce : &ncclAllReduce)(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_CUDA(cudaStreamSynchronize(job.stream));
    const sieve_stats_t warm = stats(job.sieve);
    CHECK_CUDA(cudaEventRecord(start, job.stream));
    for (int i = 0; i < iters; ++i)
      CHECK_NCCL(
          (proxied ? job.sieve.all_reduce : &ncclAllReduce)(buf, buf, count, t.nccl, ncclSum, job.comm, job.stream));
    CHECK_CUDA(cudaEventRecord(stop, job.stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    *wire_bytes = double(stats(job.sieve).bytes_wire_sent - warm.bytes_wire_sent) / iters;
    (void)before;
    return double(ms) / iters;
  };
  double dense_wire = 0;
  const double dense_ms = time_calls(false, &dense_wire);
  for (double d : densities) {
    size_t kept = 0;
    const std::vector<uint8_t> mask = make_mask(count, d, 5, &kept);
    if (job.sieve.publish(buf, count, t.sieve, mask.data(), nullptr) != 0) fail("publish: %s", job.sieve.last_error());
    if (job.sieve.commit(job.comm, job.stream, 0, nullptr) != 0) fail("commit: %s", job.sieve.last_error());
    double wire = 0;
    const double ms = time_calls(true, &wire);
    job.sieve.retract(buf);
    if (job.rank != 0) continue;
    const double density = double(kept) / double(count);
    sieve::tools::gpu::print_json_line([&](sieve::tools::JsonWriter& json) {
      using sieve::tools::rounded;
      json.member("count", uint64_t(count));
      json.member("density", rounded(density, 4));
      json.member("dense_ms", rounded(dense_ms, 3));
      json.member("compact_ms", rounded(ms, 3));
      json.member("time_ratio", rounded(ms / dense_ms, 4));
      json.member("dense_wire_bytes", rounded(dense_wire, 0));
      json.member("compact_wire_bytes", rounded(wire, 0));
      json.member("wire_ratio", rounded(dense_wire > 0 ? wire / dense_wire : 0.0, 4));
      json.member("bar_time_ratio", rounded(1.15 * density, 4));
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  sieve::tools::gpu::set_fail_context("sieve-proxy-rank", &g_rank);
  int nranks = 2;
  std::string id_file, library, mode;
  size_t count = 64u << 20;  // 256 MiB of f32: large enough that the link, not latency, dominates
  int iters = 10;
  std::vector<double> densities = {0.5, 0.2, 0.1};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--rank") g_rank = std::atoi(next().c_str());
    else if (a == "--nranks") nranks = std::atoi(next().c_str());
    else if (a == "--id-file") id_file = next();
    else if (a == "--library") library = next();
    else if (a == "--count") count = sieve::tools::gpu::size_option(a, next());
    else if (a == "--iters") iters = std::atoi(next().c_str());
    else if (a == "--densities") {
      densities.clear();
      std::string list = next();
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        densities.push_back(std::atof(list.substr(p, q - p).c_str()));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else if (a == "check" || a == "learned" || a == "bench" || a == "sharded" || a == "union" || a == "capture")
      mode = a;
    else fail("unknown argument %s", a.c_str());
  }
  if (id_file.empty() || library.empty() || mode.empty() || nranks < 1 || g_rank < 0 || g_rank >= nranks)
    fail(
        "usage: sieve-proxy-rank --rank R --nranks N --id-file F --library L "
        "{check|learned|sharded|union|capture|bench}");
  Job job;
  job.rank = g_rank;
  job.nranks = nranks;
  job.sieve = load(library);
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&job.stream, cudaStreamNonBlocking));
  const ncclUniqueId id = rendezvous(g_rank, id_file);
  CHECK_NCCL(ncclCommInitRank(&job.comm, nranks, id, g_rank));
  if (mode == "check") run_check(job);
  else if (mode == "learned") run_learned(job);
  else if (mode == "sharded") run_sharded(job);
  else if (mode == "union") run_union(job);
  else if (mode == "capture") run_capture(job);
  else run_bench(job, count, iters, densities);
  CHECK_CUDA(cudaStreamSynchronize(job.stream));
  ncclCommDestroy(job.comm);
  return 0;
}
