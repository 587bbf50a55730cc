// SPDX-License-Identifier: Apache-2.0
// sieve-bench --train fsdp2: real FSDP2 training (PyTorch's fully_shard on a CPU mesh, Gloo) by N
// Python ranks (tools/share/fsdp2_train.py) in the namespace lab, once per mode: FSDP2 as is, Sieve's
// custom collectives (sieve.fsdp), and at more than 2 nodes FSDP2 as is regrouped and sharded on
// dim 1 (its own result under other configurations: the reduction-order noise). Prints every step's loss, wire bytes,
// step and communication time, and whether the losses and parameters match FSDP2's.
#pragma once

#include "tools/sieve-bench/options.h"

namespace sieve::bench {

// 0 when every mode ran; 1 when one failed or Sieve's losses differ from FSDP2's at 2 nodes; 2 when
// the run could not start (no root, no lab, no Python with FSDP2).
int run_train_fsdp2(const Options& options);

}  // namespace sieve::bench
