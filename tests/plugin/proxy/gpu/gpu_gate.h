// SPDX-License-Identifier: Apache-2.0
// When a GPU test may skip: only where there is no device (no driver installed, or none visible), as
// on CI. Any other CUDA failure, a driver older than the runtime included, fails the test with the
// reason: a GPU machine that cannot run the tests must not look like a machine without a GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

namespace sieve::plugin::proxy::testing {

// "" when the tests can run; otherwise why they skip. Records a failure for a broken CUDA setup.
inline std::string gpu_skip_reason() {
  int driver = 0, runtime = 0, devices = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (driver == 0) return "no CUDA driver installed (no GPU on this machine)";
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && devices == 0)) return "no CUDA device visible";
  if (e != cudaSuccess) {
    ADD_FAILURE() << "CUDA is installed but unusable: " << cudaGetErrorString(e) << " (driver supports CUDA "
                  << driver / 1000 << "." << driver % 1000 / 10 << ", runtime is " << runtime / 1000 << "."
                  << runtime % 1000 / 10 << ")";
    return "CUDA unusable (reported as a failure above)";
  }
  return "";
}

}  // namespace sieve::plugin::proxy::testing

#define SIEVE_REQUIRE_GPU()                                                            \
  do {                                                                                 \
    const std::string sieve_why_ = ::sieve::plugin::proxy::testing::gpu_skip_reason(); \
    if (!sieve_why_.empty()) GTEST_SKIP() << sieve_why_;                               \
  } while (0)
