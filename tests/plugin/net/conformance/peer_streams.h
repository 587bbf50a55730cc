// SPDX-License-Identifier: Apache-2.0
// One end of a conformance transfer: a window of outstanding requests kept full, tested oldest first,
// the way NCCL's proxy drives a connection. Used by the conformance peer program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/nccl_emulator/plugin_loader.h"

namespace sieve::conformance {

struct StreamEnd {
  tools::NetPlugin* net = nullptr;
  void* comm = nullptr;  // send comm or recv comm
  bool sender = false;
  uint64_t seed = 1;
  int stall_ms = 20000;  // no request completing for this long is a failure (never a hang)
  bool sparse = false;   // fill_sparse_pattern instead of fill_pattern (80 % zero fp32 words)
};

struct StreamResult {
  bool ok = true;
  std::string error;      // first failure, human readable
  int plugin_result = 0;  // the ncclResult_t that ended the stream, 0 if none
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

// Sends or receives messages first_index.. with the given sizes, `window` outstanding (<= 32).
// The receiver posts posted_size(size, index), checks the reported size, every byte, and that nothing
// was written past the message (a canary up to the posted size plus a guard zone).
StreamResult run_stream(const StreamEnd& end, const std::vector<size_t>& sizes, int window, uint64_t first_index,
                        bool verify);

// Endless stream of `size` messages until the plugin reports an error; prints "PROGRESS" once the
// first message completes and "ERROR <monotonic ms> <result>" when the error comes.
StreamResult run_until_error(const StreamEnd& end, size_t size, int window, void (*say)(const char* fmt, ...));

}  // namespace sieve::conformance
