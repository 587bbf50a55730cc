// SPDX-License-Identifier: Apache-2.0
// Runs a whole sieve-bench: builds the workload, brings up the lab (namespaces as root, loopback
// otherwise), starts N node processes per mode, paces their iterations, gathers their numbers,
// optionally runs the Gloo peer on the same lab, and always tears everything down: children are
// killed and reaped and namespaces removed on every exit path, SIGINT and SIGTERM included.
#pragma once

#include "tools/sieve-bench/options.h"
#include "tools/sieve-bench/report.h"

namespace sieve::bench {

// Fills `report`; returns the process exit status (0 = ran and every sum was exact).
int run_bench(const Options& options, RunReport* report);

}  // namespace sieve::bench
