// SPDX-License-Identifier: Apache-2.0
// What sieve-perf measured per link, its verdict against the bars, and the two ways it is shown:
// the Markdown table on stdout and --json (through the tools' one JSON writer).
#pragma once

#include <string>
#include <vector>

#include "tools/sieve-perf/perf_options.h"

namespace sieve::perf {

struct Measure {
  bool ok = false;
  std::string error;
  double gbps = 0;
  double bytes = 0;
  double cpu_seconds = 0;  // both ends
  double cpu_sender = 0, cpu_receiver = 0;
  double cpu_process = 0;  // both ends, whole processes start to exit (start-up included)
  double cpu_driver = 0;   // both ends, the driver's polling loop outside plugin calls (not in cpu_seconds)
  // Packets the sending node's shaper (tbf) held back during the run; -1 where the link has none.
  double shaper_holds = -1;
  double cpu_per_gb() const { return bytes > 0 ? cpu_seconds / (bytes / 1e9) : 0; }
  double holds_per_gb() const { return shaper_holds >= 0 && bytes > 0 ? shaper_holds / (bytes / 1e9) : -1; }
};

struct LinkResult {
  std::string link;
  std::string rate;  // "" unshaped
  Measure iperf, sieve;
  Measure other;  // --compare's plugin (ok false when not asked for)
};

// One Measure standing for several runs: the median Gbit/s, the median CPU per GB and the median
// shaper holds per GB (each taken on its own); an error when any run failed (the first one's).
Measure median_of(const std::vector<Measure>& runs);

// PASS / FAIL (...) on shaped links, "reported" on others, ERROR when either side failed; *failed
// is set for anything but PASS and "reported".
std::string verdict(const LinkResult& result, bool* failed);
std::string format_table(const std::vector<LinkResult>& results, const Options& options, bool* failed);
std::string format_json(const std::vector<LinkResult>& results, const Options& options);

}  // namespace sieve::perf
