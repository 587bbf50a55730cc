// The CUDA backend and the compress/cuda kernels on a real GPU: gather, scatter (in-place and
// out-of-place, exact zeros), the learned-mask violation check and nonzero records, for every element
// size (f16/bf16, f32, f64) and both plan layouts. Skips, saying why, when no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "plugin/proxy/cuda_backend.h"

namespace sieve::plugin::proxy {
namespace {

bool have_gpu(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device visible (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device visible (cudaGetDeviceCount returned 0)";
    return false;
  }
  return true;
}

#define REQUIRE_GPU()                       \
  do {                                      \
    std::string why_;                       \
    if (!have_gpu(&why_)) GTEST_SKIP() << why_; \
  } while (0)

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

class KernelTest : public ::testing::TestWithParam<ElemType> {};

TEST_P(KernelTest, GatherThenScatterKeepsKeptElementsAndZeroesTheRest) {
  REQUIRE_GPU();
  const ElemType type = GetParam();
  const size_t es = element_size(type);
  const uint64_t count = 100003;
  CudaBackend backend;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void *src, *dst;
  ASSERT_EQ(cudaMalloc(&src, count * es), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, count * es), cudaSuccess);
  for (const Shape& shape : shapes(count)) {
    SCOPED_TRACE(std::string(shape.name) + " " + elem_type_name(type));
    const std::vector<uint8_t> data = random_data(count, es, 1), garbage = random_data(count, es, 2);
    ASSERT_EQ(cudaMemcpy(src, data.data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dst, garbage.data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
    std::unique_ptr<DevicePlan> plan;
    ASSERT_EQ(backend.create_plan(shape.mask, type, false, &plan), 0);
    ASSERT_EQ(plan->nnz(), shape.mask.kept());
    ASSERT_EQ(backend.gather(*plan, src, s), 0);
    std::vector<uint8_t> compact(plan->nnz() * es);
    ASSERT_EQ(cudaMemcpyAsync(compact.data(), plan->compact(), compact.size(), cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    uint64_t j = 0;
    for (uint64_t i = 0; i < count; ++i)
      if (shape.mask.test(i)) {
        ASSERT_EQ(std::memcmp(&compact[j * es], &data[i * es], es), 0) << "compact element " << j;
        ++j;
      }
    // Out of place into garbage, then in place over the source itself.
    for (void* target : {dst, src}) {
      ASSERT_EQ(backend.scatter(*plan, target, s), 0);
      std::vector<uint8_t> out(count * es);
      ASSERT_EQ(cudaMemcpyAsync(out.data(), target, out.size(), cudaMemcpyDeviceToHost, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const std::vector<uint8_t> zero(es, 0);
      for (uint64_t i = 0; i < count; ++i) {
        if (shape.mask.test(i)) ASSERT_EQ(std::memcmp(&out[i * es], &data[i * es], es), 0) << "element " << i;
        else ASSERT_EQ(std::memcmp(&out[i * es], zero.data(), es), 0) << "masked element " << i << " must be +0";
      }
    }
  }
  cudaFree(src);
  cudaFree(dst);
  cudaStreamDestroy(s);
}

TEST_P(KernelTest, RecordsNonzeroPatternsAndViolationsForTheHostToReadLater) {
  REQUIRE_GPU();
  const ElemType type = GetParam();
  const size_t es = element_size(type);
  const uint64_t count = 4099;
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
  ASSERT_EQ(backend.create_slot(count, &slot), 0);
  ASSERT_EQ(backend.record_nonzero(*slot, buf, count, type, s), 0);
  compress::Mask got;
  ASSERT_EQ(backend.read_nonzero(*slot, count, &got), 0);
  EXPECT_TRUE(got == want);

  // Check against a mask that prunes elements 0 and 3 (both nonzero): two violations, bad flag.
  compress::Mask keep = want;
  keep.set_range(0, 1, false);
  keep.set_range(3, 1, false);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin}) {
    std::unique_ptr<DevicePlan> plan;
    ASSERT_EQ(backend.create_plan(keep, type, true, &plan), 0);
    const FlagEncoding enc = flag_encoding(type, op);
    ASSERT_EQ(backend.check(*plan, buf, enc, s), 0);
    ASSERT_EQ(backend.record_flag(*slot, *plan, s), 0);
    uint64_t flag = 0, violations = 0;
    ASSERT_EQ(backend.read_flag(*slot, &flag, &violations), 0);
    EXPECT_EQ(violations, 2u) << reduce_op_name(op);
    EXPECT_EQ(flag, enc.bad_bits) << reduce_op_name(op);
    EXPECT_TRUE(flag_reports_violation(enc, type, flag));
    // And the same buffer against its own pattern: no violation, ok flag.
    std::unique_ptr<DevicePlan> exact;
    ASSERT_EQ(backend.create_plan(want, type, true, &exact), 0);
    ASSERT_EQ(backend.check(*exact, buf, enc, s), 0);
    ASSERT_EQ(backend.record_flag(*slot, *exact, s), 0);
    ASSERT_EQ(backend.read_flag(*slot, &flag, &violations), 0);
    EXPECT_EQ(violations, 0u);
    EXPECT_EQ(flag, enc.ok_bits);
  }
  cudaFree(buf);
  cudaStreamDestroy(s);
}

TEST(KernelCaptureTest, GatherAndScatterCanBeCapturedIntoAGraph) {
  REQUIRE_GPU();
  CudaBackend backend;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const uint64_t count = 1 << 16;
  compress::Mask m(count, false);
  m.set_range(100, 5000, true);
  std::unique_ptr<DevicePlan> plan;
  ASSERT_EQ(backend.create_plan(m, ElemType::kF32, false, &plan), 0);
  void* buf;
  ASSERT_EQ(cudaMalloc(&buf, count * 4), cudaSuccess);
  EXPECT_FALSE(backend.capturing(s));
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_TRUE(backend.capturing(s));
  EXPECT_EQ(backend.gather(*plan, buf, s), 0);
  EXPECT_EQ(backend.scatter(*plan, buf, s), 0);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(buf);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(EveryType, KernelTest,
                         ::testing::Values(ElemType::kF16, ElemType::kBF16, ElemType::kF32, ElemType::kF64),
                         [](const ::testing::TestParamInfo<ElemType>& p) { return elem_type_name(p.param); });

}  // namespace
}  // namespace sieve::plugin::proxy
