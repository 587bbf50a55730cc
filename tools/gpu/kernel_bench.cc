// SPDX-License-Identifier: Apache-2.0
// sieve-proxy-kernel-bench: gather/scatter bandwidth of the collective proxy's kernels against a
// device-to-device cudaMemcpy of the same useful bytes, in one run (ratios, not absolute times, are
// the result). Bar (DESIGN.md): gather/scatter >= 80 % of the copy.
//
//   sieve-proxy-kernel-bench [--count ELEMENTS] [--iters K]
// Prints one JSON line per (dtype size, mask shape, density, kernel).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compress/mask.h"
#include "compress/tile_layout.h"
#include "plugin/proxy/cuda/cuda_backend.h"
#include "tools/gpu/cli.h"

namespace {

using sieve::compress::Mask;
using sieve::plugin::proxy::CudaBackend;
using sieve::plugin::proxy::DeviceBuffer;
using sieve::plugin::proxy::DeviceLayout;
using sieve::plugin::proxy::DType;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// "runs": kept runs of ~256 elements (structured pruning); "scattered": independent elements.
Mask make_mask(uint64_t count, double density, bool runs) {
  Mask m(count, false);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  const uint64_t run = runs ? 256 : 1;
  for (uint64_t i = 0; i < count; i += run)
    if (u(rng) < density) m.set_range(i, std::min(run, count - i), true);
  return m;
}

// Bytes a gather really moves: the layout (a bit per element, 8 bytes per tile), every 32-byte sector
// of the source holding a kept element (DRAM moves whole sectors), and the compact output. For
// scattered masks this is far more than the useful bytes; it is what to compare with memory bandwidth.
double touched_bytes(const Mask& mask, size_t es) {
  uint64_t sectors = 0, last = ~0ull;
  for (uint64_t i = 0; i < mask.count(); ++i) {
    if (!mask.test(i)) continue;
    const uint64_t sector = i * es / 32;
    if (sector != last) ++sectors, last = sector;
  }
  const double layout = double(mask.count()) / 8.0 + 8.0 * double(mask.count() / sieve::compress::kTileElements + 1);
  return layout + 32.0 * double(sectors) + double(mask.kept() * es);
}

template <typename F> double time_ms(cudaStream_t s, int iters, F&& body) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  body();  // warm-up
  check(cudaEventRecord(a, s), "record");
  for (int i = 0; i < iters; ++i) body();
  check(cudaEventRecord(b, s), "record");
  check(cudaEventSynchronize(b), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  sieve::tools::gpu::set_fail_context("sieve-proxy-kernel-bench", nullptr);
  uint64_t count = 64ull << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--count") count = sieve::tools::gpu::size_option(a, argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: sieve-proxy-kernel-bench [--count ELEMENTS] [--iters K]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "sieve-proxy-kernel-bench: no CUDA device visible; nothing measured\n");
    return 77;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::fprintf(stderr, "device: %s\n", prop.name);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  CudaBackend backend;
  const std::pair<DType, const char*> types[] = {{DType::kF16, "f16"}, {DType::kF32, "f32"}, {DType::kF64, "f64"}};
  for (const auto& [type, name] : types) {
    const size_t es = sieve::compress::dtype_size(type);
    void *buf, *copy_dst;
    check(cudaMalloc(&buf, count * es), "malloc");
    check(cudaMalloc(&copy_dst, count * es), "malloc");
    check(cudaMemset(buf, 0, count * es), "memset");
    for (bool runs : {true, false}) {
      for (double density : {0.5, 0.2, 0.1}) {
        const Mask mask = make_mask(count, density, runs);
        std::unique_ptr<DeviceLayout> layout;
        std::unique_ptr<DeviceBuffer> compact;
        if (backend.create_layout(mask, 0, count, &layout) != 0 ||
            backend.create_buffer(mask.kept() * es, &compact) != 0)
          return 1;
        const size_t useful = mask.kept() * es;
        const double copy =
            time_ms(s, iters, [&] { cudaMemcpyAsync(copy_dst, buf, useful, cudaMemcpyDeviceToDevice, s); });
        // The scatter writes every element once (kept values and zeros): compare with zeroing the
        // whole buffer and copying the kept bytes, what a memset-then-scatter design would do.
        const double copy_and_zero = time_ms(s, iters, [&] {
          cudaMemsetAsync(copy_dst, 0, count * es, s);
          cudaMemcpyAsync(copy_dst, buf, useful, cudaMemcpyDeviceToDevice, s);
        });
        const double gather = time_ms(s, iters, [&] { backend.gather(*layout, es, buf, compact->data(), s); });
        const double scatter = time_ms(s, iters, [&] { backend.scatter(*layout, es, compact->data(), buf, s); });
        check(cudaGetLastError(), "kernels");
        const char* shape = runs ? "runs256" : "scattered";
        const double copy_gbps = 2.0 * double(useful) / copy / 1e6;
        const double touched_gbps = touched_bytes(mask, es) / gather / 1e6;
        // gather_vs_copy: same useful bytes; touched_vs_copy: bandwidth actually drawn (the bar's sense
        // for scattered masks, where whole sectors move for a few kept elements).
        const char* const dtype_name = name;  // a lambda cannot capture a structured binding in C++17
        sieve::tools::gpu::print_json_line([&](sieve::tools::JsonWriter& json) {
          using sieve::tools::rounded;
          json.member("dtype", dtype_name);
          json.member("mask", shape);
          json.member("density", rounded(mask.density(), 4));
          json.member("count", uint64_t(count));
          json.member("copy_ms", rounded(copy, 4));
          json.member("copy_GBps", rounded(copy_gbps, 1));
          json.member("gather_ms", rounded(gather, 4));
          json.member("gather_vs_copy", rounded(copy / gather, 3));
          json.member("gather_touched_GBps", rounded(touched_gbps, 1));
          json.member("gather_touched_vs_copy", rounded(touched_gbps / copy_gbps, 3));
          json.member("scatter_ms", rounded(scatter, 4));
          json.member("scatter_vs_zero_and_copy", rounded(copy_and_zero / scatter, 3));
        });
      }
    }
    cudaFree(buf);
    cudaFree(copy_dst);
  }
  return 0;
}
