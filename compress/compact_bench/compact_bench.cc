// SPDX-License-Identifier: Apache-2.0
// sieve-compact-bench: the host gather and scatter (compress/compact_host.h) against memcpy of the
// bytes each writes (gather: the kept elements; scatter: the whole buffer), fp32, by mask kind
// (unstructured random, 2:4, channels of 1152 elements), density and buffer size. Every iteration
// times the kernel and then the memcpy, so "ratio" (memcpy time / kernel time, i.e. the kernel's
// bandwidth as a fraction of memcpy's for the same output bytes) pairs measurements taken moments
// apart: on a shared machine the load drifts less between the two than between two benchmarks.
// Each point runs --benchmark_repetitions times (3 by default); min/median/max give the spread. With
// one thread the times are the thread's CPU time (a shared machine's other jobs drop out).
//
//   sieve-compact-bench [--threads=N] [--level=scalar|avx2|avx512] [--sizes=4,16,64,256 (MiB)]
//                       [Google Benchmark flags, e.g. --benchmark_filter=gather]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <time.h>

#include "compress/compact_host.h"
#include "compress/tile_layout.h"

namespace {

using sieve::compress::CompactMask;
using sieve::compress::HostCompactOptions;
using sieve::compress::SimdLevel;

constexpr uint64_t kChannel = 1152;  // 3 x 3 x 128: one output channel of a conv layer's weight

// One buffer's mask and data, built once per (kind, density, size) and kept while the benchmarks of
// that point run: building a 256 MiB one takes longer than measuring it.
struct Fixture {
  std::string kind;
  double density = 0;
  uint64_t count = 0;
  std::vector<uint32_t> bits;
  std::vector<uint64_t> tile_base;
  uint64_t nnz = 0;
  // 64-byte aligned, as torch's CPU allocator aligns tensors.
  std::vector<float> storage;
  float *src = nullptr, *compact = nullptr, *copy = nullptr;
};

std::unique_ptr<Fixture> build(const std::string& kind, double density, uint64_t count) {
  auto f = std::make_unique<Fixture>();
  f->kind = kind, f->density = density, f->count = count;
  f->bits.assign((count + 31) / 32, 0);
  std::mt19937_64 rng(42);
  const uint64_t threshold = uint64_t(density * 1e6);
  auto keep = [&](uint64_t i) { f->bits[i / 32] |= 1u << (i % 32); };
  if (kind == "unstructured") {
    for (uint64_t i = 0; i < count; ++i)
      if (rng() % 1000000 < threshold) keep(i);
  } else if (kind == "2:4") {
    for (uint64_t g = 0; g + 4 <= count; g += 4) {
      const uint64_t a = rng() % 4, b = (a + 1 + rng() % 3) % 4;
      keep(g + a), keep(g + b);
    }
  } else {  // channels
    for (uint64_t row = 0; row * kChannel < count; ++row)
      if (rng() % 1000000 < threshold)
        for (uint64_t i = row * kChannel; i < std::min(count, (row + 1) * kChannel); ++i) keep(i);
  }
  const uint64_t tiles = (count + sieve::compress::kTileElements - 1) / sieve::compress::kTileElements;
  f->tile_base.assign(tiles + 1, 0);
  uint64_t kept = 0;
  for (uint64_t t = 0; t < tiles; ++t) {
    f->tile_base[t] = kept;
    for (uint64_t w = t * 64; w < std::min<uint64_t>(f->bits.size(), (t + 1) * 64); ++w)
      kept += uint64_t(__builtin_popcount(f->bits[w]));
  }
  f->tile_base[tiles] = f->nnz = kept;
  const uint64_t padded = (count + 15) / 16 * 16;
  f->storage.assign(3 * padded + 16, 0.0f);  // touched once, so no iteration pays for first-touch faults
  float* base = f->storage.data() + (16 - (reinterpret_cast<uintptr_t>(f->storage.data()) % 64) / 4) % 16;
  f->src = base, f->compact = base + padded, f->copy = base + 2 * padded;
  for (uint64_t i = 0; i < count; ++i) f->src[i] = float(rng() % 1000) + 0.5f;
  return f;
}

Fixture& fixture(const std::string& kind, double density, uint64_t count) {
  static std::unique_ptr<Fixture> last;  // one at a time: four 256 MiB buffers are enough memory
  if (!last || last->kind != kind || last->density != density || last->count != count) {
    last.reset();
    last = build(kind, density, count);
  }
  return *last;
}

struct Point {
  std::string kind;
  double density;
  uint64_t bytes;
  bool scatter;
  HostCompactOptions options;
};

void bench(benchmark::State& state, const Point& p) {
  Fixture& f = fixture(p.kind, p.density, p.bytes / sizeof(float));
  const CompactMask mask{f.bits.data(), f.tile_base.data(), f.count};
  const size_t out_bytes = (p.scatter ? f.count : f.nnz) * sizeof(float);
  double kernel_s = 0, memcpy_s = 0;
  // One thread: its CPU time, which leaves out the time other jobs on a shared machine hold the core
  // (stalls on memory count); several: wall-clock time, which is all there is for a team of threads.
  const bool one_thread = p.options.threads == 1;
  auto now = [one_thread] {
    if (!one_thread) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  if (!p.scatter)  // scatter reads what a gather wrote
    sieve::compress::gather_host(mask, 0, f.count, 4, f.src, f.compact, p.options);
  for (auto _ : state) {
    const double t0 = now();
    if (p.scatter) sieve::compress::scatter_host(mask, 0, f.count, 4, f.compact, f.copy, p.options);
    else sieve::compress::gather_host(mask, 0, f.count, 4, f.src, f.compact, p.options);
    const double t1 = now();
    std::memcpy(f.copy, f.src, out_bytes);
    const double t2 = now();
    benchmark::ClobberMemory();
    const double k = t1 - t0;
    kernel_s += k, memcpy_s += t2 - t1;
    state.SetIterationTime(k);
  }
  const double n = double(state.iterations());
  state.counters["GB/s"] = double(out_bytes) * n / kernel_s / 1e9;
  state.counters["memcpy_GB/s"] = double(out_bytes) * n / memcpy_s / 1e9;
  state.counters["ratio"] = memcpy_s / kernel_s;
  state.counters["d"] = double(f.nnz) / double(f.count);
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

bool take(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  HostCompactOptions options;
  std::vector<uint64_t> sizes_mib = {4, 16, 64, 256};
  std::vector<char*> args = {argv[0]};
  bool repetitions_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: sieve-compact-bench [--threads=N] [--level=scalar|avx2|avx512] [--sizes=4,16,64,256]\n"
          "                           [Google Benchmark flags, e.g. --benchmark_filter=gather]\n"
          "  --threads=N   threads per call (at most N; default 1)\n"
          "  --level=L     the instruction set to force (default: the best this CPU has)\n"
          "  --sizes=LIST  buffer sizes in MiB\n"
          "  and Google Benchmark's flags: --benchmark_filter=REGEX, --benchmark_min_time=S,\n"
          "  --benchmark_repetitions=N (3 here unless given), --benchmark_format=json, ...\n");
      return 0;
    }
    if (take(argv[i], "--threads", &value)) {
      options.threads = unsigned(std::max(1, std::atoi(value.c_str())));
    } else if (take(argv[i], "--level", &value)) {
      if (value != "scalar" && value != "avx2" && value != "avx512") {
        std::fprintf(stderr, "sieve-compact-bench: --level is scalar, avx2 or avx512, not '%s'\n", value.c_str());
        return 2;
      }
      options.simd = value == "scalar" ? SimdLevel::kScalar : value == "avx2" ? SimdLevel::kAvx2 : SimdLevel::kAvx512;
    } else if (take(argv[i], "--sizes", &value)) {
      sizes_mib.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        sizes_mib.push_back(std::strtoull(item.c_str(), nullptr, 10));
    } else {
      repetitions_given |= std::strncmp(argv[i], "--benchmark_repetitions", 23) == 0;
      args.push_back(argv[i]);
    }
  }
  std::string repetitions = "--benchmark_repetitions=3";
  if (!repetitions_given) args.push_back(repetitions.data());

  struct Mask {
    const char* kind;
    double density;
  };
  const Mask masks[] = {{"unstructured", 0.05}, {"unstructured", 0.2}, {"unstructured", 0.5}, {"2:4", 0.5},
                        {"channels", 0.05},     {"channels", 0.2},     {"channels", 0.5}};
  for (uint64_t mib : sizes_mib)
    for (const Mask& m : masks)
      for (bool scatter : {false, true}) {
        char name[96];
        std::snprintf(name, sizeof name, "%s/%s/d=%.2f/%lluMiB", scatter ? "scatter" : "gather", m.kind, m.density,
                      static_cast<unsigned long long>(mib));
        Point p{m.kind, m.density, mib << 20, scatter, options};
        benchmark::RegisterBenchmark(name, [p](benchmark::State& s) { bench(s, p); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->ComputeStatistics("min", min_of)
            ->ComputeStatistics("max", max_of);
      }
  int count = int(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 2;
  std::printf(
      "sieve-compact-bench: fp32, path %s, up to %u thread(s); GB/s = decimal output bytes per second; "
      "ratio = memcpy time / kernel time for the same output bytes (1 = memcpy's bandwidth)\n",
      sieve::compress::simd_level_name(sieve::compress::compact_simd_level(options.simd)), options.threads);
  std::fflush(stdout);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
