// SIEVE_STATS_FILE: the process's traffic written for ops, at exit and every SIEVE_STATS_INTERVAL
// seconds. Started by whichever face of the library initialises first; one writer per process.
#pragma once

#include "plugin/config.h"
#include "plugin/telemetry.h"

namespace sieve::plugin {

// What this process has moved so far: process counters plus every connection's traffic.
Snapshot current_snapshot();

// Starts the export when settings.stats_file is set (idempotent, thread-safe). The writer lives
// until the process exits (or the library is unloaded) and writes a final snapshot then.
void start_stats_export(const config::Settings& settings);

}  // namespace sieve::plugin
