// SPDX-License-Identifier: Apache-2.0
// One end of a sieve-perf stream: the plugin loaded through tools/common's loader, `window` messages
// of `size` bytes outstanding, for `seconds`. The sender ends the stream with `window` empty messages,
// exactly enough to complete every receive the receiver still has posted, so both ends close with
// nothing outstanding.
#pragma once

#include <cstddef>
#include <string>

namespace sieve::perf {

struct PeerOptions {
  std::string plugin;  // path or NCCL plugin name
  int version = 0;     // 0: newest exported
  bool sender = false;
  std::string handle;  // sender: the receiver's handle, hex
  size_t size = 4u << 20;
  int window = 8;
  double seconds = 10;
  int poll_us = 1000;     // sleep between unsuccessful test() calls (sleep driver)
  bool spin = false;      // spin driver: yield instead of sleeping
  int zeros_percent = 0;  // share of the buffers' words that are exactly zero (the wire codec elides them)
  int word = 4;           // word size of that data: 4 (fp32) or 2 (bf16)
};

// Runs the peer; prints "HANDLE <hex>" (receiver) then "RESULT bytes=<n> seconds=<s> messages=<m>
// cpu=<s>" (cpu: all threads, streaming phase only) or "FAIL <why>" on stdout. Returns the process exit status.
int run_peer(const PeerOptions& options);

}  // namespace sieve::perf
