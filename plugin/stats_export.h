// SPDX-License-Identifier: Apache-2.0
// SIEVE_STATS_FILE: the process's traffic written for ops. A file exists only once it holds real
// totals: it is written every SIEVE_STATS_INTERVAL seconds while the net plugin is in use, when
// NCCL finalizes a communicator's context, when the process's last connection closes, and at exit.
// Never at start (a file of zeros left by a rank killed early reads as a counter reset), so a rank
// killed before its first write leaves no file, and one killed later leaves its last real totals.
// Started by the net plugin's first init and stopped, after a final write, when its last reference
// goes; one export per process.
#pragma once

#include <string>

#include "plugin/config.h"
#include "plugin/telemetry.h"

namespace sieve::plugin {

// What this process has moved so far: process counters plus every connection's traffic.
Snapshot current_snapshot();

// Starts the export when settings.stats_file is set and it is not running (thread-safe). Returns ""
// when it runs (or is off), else why it cannot run (also warned, once per process): a path that is a
// directory or lies in a missing one, or a directory that takes no files. Nothing is created then.
std::string start_stats_export(const config::Settings& settings);

// Writes the current totals now, if the export runs.
void write_stats_export();

// Writes the final totals, stops the periodic writes and gives up the claim on a name without %p
// (its lock file is removed). A later start_stats_export starts it again.
void stop_stats_export();

}  // namespace sieve::plugin
