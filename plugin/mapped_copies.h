// SPDX-License-Identifier: Apache-2.0
// Copies of this library mapped into one process: NCCL_NET_PLUGIN=<path> and LD_PRELOAD by name can
// each map another file (the .deb's and a /usr/local install), and then masks published through one
// copy's C API never reach the proxy of the other, nor do its settings. Said once per process.
#pragma once

#include <string>
#include <vector>

namespace sieve::plugin {

struct MappedCopies {
  std::vector<std::string> paths;  // every copy, this one included, in the order they were mapped
  size_t own = 0;                  // this copy's index in paths
};

// The mapped objects named `name` or like this copy's own file, each file once (this copy is found
// by the address of its own code).
MappedCopies find_mapped_copies(const std::string& name);

// The warning for `copies`, or "" when there is one copy, or when a later-mapped copy will say it:
// the last one mapped speaks, so that of two copies whose faces both start, one line is logged.
std::string copies_warning(const MappedCopies& copies);

// Logs copies_warning() of this process once (start_process_log calls it).
void warn_about_other_copies();

}  // namespace sieve::plugin
