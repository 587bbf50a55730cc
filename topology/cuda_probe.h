// SPDX-License-Identifier: Apache-2.0
// CUDA device ordinals for GPUs found on PCI, from the CUDA driver when it can be loaded. Sieve
// has no link dependency on CUDA: libcuda is opened at run time and its absence is not an error.
#pragma once

#include <string>
#include <vector>

#include "topology/machine.h"

namespace sieve::topology {

// Sets cuda_index on every GPU the driver knows by bus id (respecting CUDA_VISIBLE_DEVICES, like
// the application does). Returns "" on success, else a note saying why indices stay unknown.
std::string assign_cuda_indices(std::vector<Gpu>& gpus);

}  // namespace sieve::topology
