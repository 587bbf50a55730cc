// SPDX-License-Identifier: Apache-2.0
// The CUDA backend and the compress/cuda kernels on a real GPU: gather and the one-pass scatter
// (in place and out of place, exact zeros) against the host reference of the same tile layout, for
// every element size and for unaligned spans (the shards of reduce-scatter and all-gather); the
// learned-mask violation check and records; graph capture. Skips only where there is no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "compress/tile_layout.h"
#include "plugin/proxy/cuda/cuda_backend.h"
#include "tests/plugin/proxy/gpu/gpu_gate.h"

namespace sieve::plugin::proxy {
namespace {

struct Shape {
  const char* name;
  compress::Mask mask;
};

std::vector<Shape> shapes(uint64_t count) {
  std::mt19937_64 rng(3);
  std::vector<Shape> out;
  compress::Mask scattered(count, false), runs(count, false), all(count, true), none(count, false), edges(count, false);
  for (uint64_t i = 0; i < count; ++i)
    if (rng() % 10 == 0) scattered.set_range(i, 1, true);
  for (uint64_t i = 0; i < count; i += 1000) runs.set_range(i, std::min<uint64_t>(300, count - i), true);
  edges.set_range(0, 1, true);
  edges.set_range(count - 1, 1, true);
  out.push_back({"scattered", scattered});
  out.push_back({"runs", runs});
  out.push_back({"all", all});
  out.push_back({"none", none});
  out.push_back({"edges", edges});
  return out;
}

// Random bit patterns with no zero elements, so every gathered element is recognisable.
std::vector<uint8_t> random_data(uint64_t count, size_t es, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> d(count * es);
  for (auto& b : d) b = uint8_t(rng() | 1);
  return d;
}

std::vector<uint8_t> download(const void* device, size_t bytes, cudaStream_t s) {
  std::vector<uint8_t> out(bytes);
  EXPECT_EQ(cudaMemcpyAsync(out.data(), device, bytes, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return out;
}

class KernelTest : public ::testing::TestWithParam<DType> {};

TEST_P(KernelTest, GatherAndScatterMatchTheHostReferenceForWholeBuffersAndUnalignedSpans) {
  SIEVE_REQUIRE_GPU();
  const DType type = GetParam();
  const size_t es = compress::dtype_size(type);
  const uint64_t total = 100003;
  CudaBackend backend;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void *src, *dst, *compact;
  ASSERT_EQ(cudaMalloc(&src, total * es), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, total * es), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&compact, total * es), cudaSuccess);
  for (const Shape& shape : shapes(total)) {
    for (auto [first, count] : {std::pair<uint64_t, uint64_t>{0, total}, {37, 33333}, {2048 * 3 + 5, 4099}}) {
      SCOPED_TRACE(std::string(shape.name) + " " + dtype_name(type) + " span " + std::to_string(first));
      const compress::TileLayout host = compress::build_tile_layout(shape.mask, first, count);
      const std::vector<uint8_t> data = random_data(count, es, 1), garbage = random_data(count, es, 2);
      std::vector<uint8_t> want_compact(host.nnz * es), want_out(count * es);
      compress::gather_reference(host, es, data.data(), want_compact.data());
      compress::scatter_reference(host, es, want_compact.data(), want_out.data());
      ASSERT_EQ(cudaMemcpy(src, data.data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dst, garbage.data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
      std::unique_ptr<DeviceLayout> layout;
      ASSERT_EQ(backend.create_layout(shape.mask, first, count, &layout), 0);
      ASSERT_EQ(layout->nnz(), host.nnz);
      ASSERT_EQ(backend.gather(*layout, es, src, compact, s), 0);
      EXPECT_EQ(download(compact, host.nnz * es, s), want_compact);
      // Out of place over garbage, then in place over the source itself.
      for (void* target : {dst, src}) {
        ASSERT_EQ(backend.scatter(*layout, es, compact, target, s), 0);
        EXPECT_EQ(download(target, count * es, s), want_out);
      }
    }
  }
  cudaFree(src);
  cudaFree(dst);
  cudaFree(compact);
  cudaStreamDestroy(s);
}

TEST_P(KernelTest, RecordsNonzeroPatternsAndViolationsForTheHostToReadLater) {
  SIEVE_REQUIRE_GPU();
  const DType type = GetParam();
  const size_t es = compress::dtype_size(type);
  const uint64_t count = 40099;
  CudaBackend backend;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  // Nonzero at multiples of 3; negative zero (only the sign bit) at multiples of 5 counts as zero.
  std::vector<uint8_t> data(count * es, 0);
  compress::Mask want(count, false);
  for (uint64_t i = 0; i < count; ++i) {
    if (i % 3 == 0) {
      data[i * es] = 1;
      want.set_range(i, 1, true);
    } else if (i % 5 == 0) {
      data[i * es + es - 1] = 0x80;
    }
  }
  void* buf;
  ASSERT_EQ(cudaMalloc(&buf, count * es), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(buf, data.data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
  std::unique_ptr<LagSlot> slot;
  CommLiveness live;  // no communicator: nothing to abort
  ASSERT_EQ(backend.create_slot(count, &slot), 0);
  ASSERT_EQ(backend.record_nonzero(*slot, buf, count, type, s), 0);
  compress::Mask got;
  ASSERT_EQ(backend.read_nonzero(*slot, nullptr, live, count, &got), 0);
  EXPECT_TRUE(got == want);

  // Against a mask that prunes elements 0, 3 and 30003 (all nonzero): three violations, bad flag.
  compress::Mask keep = want;
  for (uint64_t i : {0, 3, 30003}) keep.set_range(i, 1, false);
  const FlagEncoding enc = flag_encoding(type);
  std::unique_ptr<DeviceBuffer> flag, counter;
  ASSERT_EQ(backend.create_buffer(8, &flag), 0);
  ASSERT_EQ(backend.create_buffer(8, &counter), 0);
  for (const compress::Mask* m : {&keep, &want}) {
    std::unique_ptr<DeviceLayout> layout;
    ASSERT_EQ(backend.create_layout(*m, 0, count, &layout), 0);
    ASSERT_EQ(backend.check(*layout, es, buf, flag->data(), enc, *counter, s), 0);
    ASSERT_EQ(backend.record_flag(*slot, flag->data(), es, *counter, s), 0);
    uint64_t bits = 0, violations = 0;
    ASSERT_EQ(backend.read_flag(*slot, nullptr, live, &bits, &violations), 0);
    EXPECT_EQ(violations, m == &keep ? 3u : 0u);
    EXPECT_EQ(bits, m == &keep ? enc.bad_bits : enc.ok_bits);
    EXPECT_EQ(flag_reports_violation(type, bits), m == &keep);
  }
  cudaFree(buf);
  cudaStreamDestroy(s);
}

TEST(KernelCaptureTest, GatherAndScatterCanBeCapturedIntoAGraph) {
  SIEVE_REQUIRE_GPU();
  CudaBackend backend;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const uint64_t count = 1 << 16;
  compress::Mask m(count, false);
  m.set_range(100, 5000, true);
  std::unique_ptr<DeviceLayout> layout;
  std::unique_ptr<DeviceBuffer> compact;
  ASSERT_EQ(backend.create_layout(m, 0, count, &layout), 0);
  ASSERT_EQ(backend.create_buffer(m.kept() * 4, &compact), 0);
  std::vector<float> host(count);
  for (uint64_t i = 0; i < count; ++i) host[i] = float(i) + 1.0f;
  void* buf;
  ASSERT_EQ(cudaMalloc(&buf, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(buf, host.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
  bool capturing = true;
  ASSERT_EQ(backend.capture_status(s, &capturing), 0);
  EXPECT_FALSE(capturing);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(backend.capture_status(s, &capturing), 0);
  EXPECT_TRUE(capturing);
  EXPECT_EQ(backend.gather(*layout, 4, buf, compact->data(), s), 0);
  EXPECT_EQ(backend.scatter(*layout, 4, compact->data(), buf, s), 0);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), buf, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(host[i], m.test(i) ? float(i) + 1.0f : 0.0f) << i;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(buf);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(EveryType, KernelTest, ::testing::Values(DType::kF16, DType::kBF16, DType::kF32, DType::kF64),
                         [](const ::testing::TestParamInfo<DType>& p) { return dtype_name(p.param); });

}  // namespace
}  // namespace sieve::plugin::proxy
