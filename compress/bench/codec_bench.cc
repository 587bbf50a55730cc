// sieve-codec-bench: encode and decode throughput of the wire codec per core (one thread), by SIMD
// level, element type (fp32 / bf16) and density (fraction of nonzero elements), plus the encoded
// size as a fraction of the raw bytes ("ratio" counter). Buffers are 1 MiB by default (cache
// resident, so the codec rather than DRAM is measured); --buffer_bytes=N changes that.
//
//   sieve-codec-bench [--buffer_bytes=N] [Google Benchmark flags, e.g. --benchmark_filter=avx512]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"

namespace {

using sieve::compress::CodecOptions;
using sieve::compress::DecodeStatus;
using sieve::compress::SimdLevel;

size_t g_buffer_bytes = 1 << 20;

std::vector<uint8_t> sparse_data(size_t bytes, size_t element_size, double density) {
  std::mt19937_64 rng(42);
  std::bernoulli_distribution keep(density);
  std::vector<uint8_t> data(bytes, 0);
  for (size_t i = 0; i + element_size <= bytes; i += element_size) {
    if (!keep(rng)) continue;
    uint64_t v;
    do v = rng(); while ((v & ((uint64_t{1} << (8 * element_size)) - 1)) == 0);
    std::memcpy(&data[i], &v, element_size);
  }
  return data;
}

void report(benchmark::State& state, size_t raw, size_t encoded) {
  state.SetBytesProcessed(int64_t(state.iterations() * raw));
  // Decimal GB/s of raw bytes, the unit of the project's bar.
  state.counters["GBps"] = benchmark::Counter(double(state.iterations()) * double(raw) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["ratio"] = double(encoded) / double(raw);
}

void bench_encode(benchmark::State& state, SimdLevel level, size_t element, double density) {
  const auto src = sparse_data(g_buffer_bytes, element, density);
  std::vector<uint8_t> dst(sieve::compress::encode_bound(src.size()));
  CodecOptions o;
  o.simd = level;
  size_t written = 0;
  for (auto _ : state) {
    written = sieve::compress::encode(src.data(), src.size(), dst.data(), dst.size(), o);
    benchmark::DoNotOptimize(dst.data());
  }
  report(state, src.size(), written);
}

void bench_decode(benchmark::State& state, SimdLevel level, size_t element, double density) {
  const auto src = sparse_data(g_buffer_bytes, element, density);
  std::vector<uint8_t> frame(sieve::compress::encode_bound(src.size())), out(src.size());
  CodecOptions o;
  o.simd = level;
  frame.resize(sieve::compress::encode(src.data(), src.size(), frame.data(), frame.size(), o));
  for (auto _ : state) {
    size_t len = 0;
    if (sieve::compress::decode(frame.data(), frame.size(), out.data(), out.size(), &len, level) != DecodeStatus::kOk ||
        len != src.size()) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (out != src) state.SkipWithError("decoded bytes differ from the input");
  report(state, src.size(), frame.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--buffer_bytes=", 15) == 0) {
      g_buffer_bytes = std::strtoull(argv[i] + 15, nullptr, 10);
      if (g_buffer_bytes < 64) g_buffer_bytes = 64;
      continue;
    }
    args.push_back(argv[i]);
  }
  int count = int(args.size());
  const double densities[] = {0.05, 0.15, 0.25, 0.35, 0.5, 0.65, 0.75, 0.85, 0.95};
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!sieve::compress::simd_level_supported(level)) {
      std::fprintf(stderr, "sieve-codec-bench: this CPU has no %s; skipped\n", sieve::compress::simd_level_name(level));
      continue;
    }
    for (size_t element : {size_t{4}, size_t{2}})
      for (double d : densities) {
        char name[96];
        const char* type = element == 4 ? "fp32" : "bf16";
        std::snprintf(name, sizeof name, "encode/%s/%s/d=%.2f", sieve::compress::simd_level_name(level), type, d);
        benchmark::RegisterBenchmark(name, bench_encode, level, element, d);
        std::snprintf(name, sizeof name, "decode/%s/%s/d=%.2f", sieve::compress::simd_level_name(level), type, d);
        benchmark::RegisterBenchmark(name, bench_decode, level, element, d);
      }
  }
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  std::printf("buffer: %zu bytes; one thread; GBps = decimal GB/s of raw bytes; ratio = frame bytes / raw bytes\n", g_buffer_bytes);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
