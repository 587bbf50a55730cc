// SPDX-License-Identifier: Apache-2.0
// The real peer: PyTorch's Gloo all-reduce (tools/share/gloo_allreduce.py, under --python's PyTorch) run by
// N processes in the same namespaces, over the same link, on the same bucket sizes.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tools/sieve-bench/dtype.h"
#include "tools/sieve-bench/report.h"

namespace sieve::bench {

struct GlooJob {
  std::string python;  // the interpreter, by path (gloo_python())
  std::string script;
  std::vector<size_t> bucket_elements;
  // --fsdp: an FSDP step instead of the buckets' all-reduces; one rank's shard per group (padding
  // included), forward order.
  std::vector<size_t> shard_elements;
  int nodes = 0;
  std::vector<std::string> namespaces;
  std::string master_address;
  std::string ifname;
  DType dtype = DType::kF32;
  int iterations = 1;
  int warmup = 0;
  std::chrono::steady_clock::time_point deadline;
};

// Whether this machine's Gloo can sum `dtype` (torch 1.13's cannot sum bf16): a one-process group on
// a file store, seconds, run before any lab exists. False with *error saying why.
bool gloo_supports(const std::string& script, DType dtype, std::string* error, const std::string& python);

// The interpreter to run the peer with: `given` (--python) when set, else python3 found on PATH (an
// activated virtual environment's), else /usr/bin/python3.
std::string gloo_python(const std::string& given);

// Fills `result` (ok, seconds, kernel tx bytes per node; for an FSDP step, a note on how Gloo ran
// its reduce-scatters and how long its all-gathers took) or its error.
void run_gloo(const GlooJob& job, ModeResult* result);

}  // namespace sieve::bench
