// SPDX-License-Identifier: Apache-2.0
#include "topology/cuda_probe.h"

#include <dlfcn.h>

namespace sieve::topology {

namespace {

// The two driver entry points used, declared from the CUDA driver API (CUresult is an int enum,
// CUdevice an int; 0 is CUDA_SUCCESS).
using CuInit = int (*)(unsigned int flags);
using CuDeviceGetByPciBusId = int (*)(int* device, const char* bus_id);

}  // namespace

std::string assign_cuda_indices(std::vector<Gpu>& gpus) {
  if (gpus.empty()) return "";
  // Kept loaded on purpose: unloading an initialised CUDA driver under a running job is unsafe, and
  // inside NCCL the library is loaded already.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return "CUDA driver (libcuda.so.1) not found: CUDA indices of GPUs unknown";
  auto init = reinterpret_cast<CuInit>(dlsym(driver, "cuInit"));
  auto by_bus_id = reinterpret_cast<CuDeviceGetByPciBusId>(dlsym(driver, "cuDeviceGetByPCIBusId"));
  if (init == nullptr || by_bus_id == nullptr) return "CUDA driver lacks cuInit/cuDeviceGetByPCIBusId";
  const int status = init(0);
  if (status != 0) return "cuInit failed (CUresult " + std::to_string(status) + "): CUDA indices of GPUs unknown";
  for (auto& gpu : gpus) {
    int device = -1;
    // A GPU hidden by CUDA_VISIBLE_DEVICES is not found: its index stays unknown, as it should.
    if (!gpu.pci_bus_id.empty() && by_bus_id(&device, gpu.pci_bus_id.c_str()) == 0) gpu.cuda_index = device;
  }
  return "";
}

}  // namespace sieve::topology
