// SPDX-License-Identifier: Apache-2.0
// What the collective proxy adds to one interposed call on the host, with the device and NCCL taken
// out (a backend that does nothing): a call on a communicator with no commit (it passes through),
// and compacted calls after a commit, alone and in a group. Nanoseconds per call, from one run.
#include <benchmark/benchmark.h>
#include <cstdlib>

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
    if (!registry.publish(buffer.data(), compress::DType::kF32, mask, nullptr).ok()) std::abort();
    proxy.commit(kComm, kStream, 0, nullptr);
  }
  int call() {
    return proxy.all_reduce(buffer.data(), buffer.data(), kCount, DType::kF32, ReduceOp::kSum, kComm, kStream);
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

// 2-4 threads issuing calls at once, through one Proxy (one process), each on its own
// communicator (a process group per thread) or all on one (taking turns under its lock, as NCCL
// requires of callers). ns per call per thread; items_per_second is the total across threads.
struct Shared {
  testing::NullBackend backend;
  compress::MaskRegistry registry;
  ProcessStats stats;
  Proxy proxy{backend, registry, ProxyOptions(), stats};
  std::vector<std::vector<float>> buffers = std::vector<std::vector<float>>(8, std::vector<float>(kCount));
  Shared() {
    auto mask = std::make_shared<compress::Mask>(kCount, false);
    for (uint64_t i = 0; i < kCount; i += 5) mask->set_range(i, 1, true);
    for (auto& b : buffers)
      if (!registry.publish(b.data(), compress::DType::kF32, mask, nullptr).ok()) std::abort();
    for (int c = 0; c < 8; ++c) proxy.commit(comm(c), kStream, 0, nullptr);
  }
  static Comm comm(int c) { return reinterpret_cast<Comm>(0x1000 + 0x100 * c); }
};

Shared& shared() {
  static Shared* s = new Shared();  // built once, before the threads of any run use it
  return *s;
}

void Threads(benchmark::State& state, bool one_comm) {
  Shared& s = shared();
  const int t = state.thread_index();
  const Comm comm = Shared::comm(one_comm ? 0 : t);
  float* buffer = s.buffers[size_t(one_comm ? 0 : t)].data();
  for (auto _ : state)
    benchmark::DoNotOptimize(s.proxy.all_reduce(buffer, buffer, kCount, DType::kF32, ReduceOp::kSum, comm, kStream));
  state.SetItemsProcessed(state.iterations());
}
void CompactedOwnCommPerThread(benchmark::State& state) { Threads(state, false); }
void CompactedOneCommAllThreads(benchmark::State& state) { Threads(state, true); }
BENCHMARK(CompactedOwnCommPerThread)->ThreadRange(1, 4)->UseRealTime();
BENCHMARK(CompactedOneCommAllThreads)->ThreadRange(1, 4)->UseRealTime();

}  // namespace
}  // namespace sieve::plugin::proxy

BENCHMARK_MAIN();
