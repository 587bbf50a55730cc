// SPDX-License-Identifier: Apache-2.0
// CUDA and NCCL calls in the GPU kit's NCCL programs: a call that does not succeed ends the rank
// through tools/gpu/cli.h's fail(fmt, ...), which names the program and the rank and exits.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "tools/gpu/cli.h"

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) ::sieve::tools::gpu::fail("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)
#define CHECK_NCCL(call)                                                                       \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess) ::sieve::tools::gpu::fail("%s: %s", #call, ncclGetErrorString(r_)); \
  } while (0)
