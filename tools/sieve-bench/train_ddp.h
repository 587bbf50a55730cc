// SPDX-License-Identifier: Apache-2.0
// sieve-bench --train ddp: real DDP training (tools/share/ddp_train.py: PyTorch, Gloo) with one rank per
// node of the namespace lab, shaped like the rest of sieve-bench's runs. The ranks train and measure;
// rank 0 writes the report (a table, or one JSON object with --json), which this prints as it is.
#pragma once

#include <string>

#include "tools/sieve-bench/options.h"

namespace sieve::bench {

// Runs the training job; returns the exit status (0 done, 1 a rank failed or timed out, 2 it cannot
// run here: no lab, no PyTorch) with rank 0's report in *output, else the reason in *failure.
int run_ddp_training(const Options& options, std::string* output, std::string* failure);

// The job's deadline in seconds: --timeout when given, else room for the modes' dense traffic at
// --rate and the shared cores' compute (it bounds a hang; a healthy run must never be cut short).
int training_budget_seconds(const Options& options);

}  // namespace sieve::bench
