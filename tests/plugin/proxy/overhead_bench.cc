// What the collective proxy adds to one interposed call on the host, with the device and NCCL taken
// out (a backend that does nothing): a call on a communicator with no commit (it passes through),
// and compacted calls after a commit, alone and in a group. Nanoseconds per call, from one run.
#include <benchmark/benchmark.h>

#include "plugin/proxy/proxy.h"
#include "tests/plugin/proxy/null_backend.h"

namespace sieve::plugin::proxy {
namespace {

Comm const kComm = reinterpret_cast<Comm>(0x1000);
Stream const kStream = reinterpret_cast<Stream>(0x2000);
constexpr uint64_t kCount = 1 << 20;

struct Setup {
  testing::NullBackend backend;
  compress::MaskRegistry registry;
  ProcessStats stats;
  Proxy proxy{backend, registry, ProxyOptions(), stats};
  std::vector<float> buffer = std::vector<float>(kCount);

  explicit Setup(bool committed) {
    if (!committed) return;
    auto mask = std::make_shared<compress::Mask>(kCount, false);
    for (uint64_t i = 0; i < kCount; i += 5) mask->set_range(i, 1, true);
    registry.publish(buffer.data(), compress::DType::kF32, mask, nullptr);
    proxy.commit(kComm, kStream, 0, nullptr);
  }
  int call() {
    return proxy.all_reduce(buffer.data(), buffer.data(), kCount, ElemType::kF32, ReduceOp::kSum, kComm, kStream);
  }
};

void NoCommit(benchmark::State& state) {
  Setup s(false);
  for (auto _ : state) benchmark::DoNotOptimize(s.call());
}
BENCHMARK(NoCommit);

void CompactedAfterCommit(benchmark::State& state) {
  Setup s(true);
  for (auto _ : state) benchmark::DoNotOptimize(s.call());
}
BENCHMARK(CompactedAfterCommit);

void CompactedInItsOwnGroup(benchmark::State& state) {
  Setup s(true);
  for (auto _ : state) {
    s.proxy.group_start();
    benchmark::DoNotOptimize(s.call());
    s.proxy.group_end();
  }
}
BENCHMARK(CompactedInItsOwnGroup);

}  // namespace
}  // namespace sieve::plugin::proxy

BENCHMARK_MAIN();
