// SPDX-License-Identifier: Apache-2.0
// One emulated node: a child process that enters its network namespace, loads the plugin, joins
// the ring and runs the all-reduces the orchestrator paces. It talks to the orchestrator over a
// SOCK_SEQPACKET socket made before fork, one text message per packet:
//   node -> parent: "listen <hex handle>", "ready", "filled", "done <iter> <ns> <bytes> <compaction ns>", "stats ...",
//   "closed", "fail <why>" parent -> node: "peer <hex handle of the next node>", "go <iter>", "start" (once every node
//   has filled its buffers: the clock starts together everywhere), "close", "bye"
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tools/sieve-bench/buckets.h"
#include "tools/sieve-bench/fsdp_step.h"
#include "tools/sieve-bench/options.h"
#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {

struct NodeJob {
  int rank = 0;
  int nranks = 0;
  Mode mode = Mode::Dense;
  DType dtype = DType::kF32;
  const std::vector<Bucket>* buckets = nullptr;
  const std::vector<BucketMask>* masks = nullptr;  // null for the dense mode
  const FsdpWorkload* fsdp = nullptr;              // --fsdp: FSDP's collectives on these groups instead of the buckets
  std::string netns;                               // /var/run/netns/<netns> is entered before anything else; "" = stay
  std::string ifname;   // the interface whose kernel counters are read (eth0 in a lab, lo otherwise)
  std::string library;  // the plugin
  std::vector<std::pair<std::string, std::string>> environment;  // SIEVE_* for this mode
  int iterations = 1;
  int warmup = 0;
  size_t chunk_bytes = 512 << 10;
  int inflight = 8;
  int timeout_s = 300;
  // The orchestrator's pid, taken before fork: the node's parent must be this process. Not "parent
  // is not 1": in a container (docker run, a Kubernetes Job, unshare --pid) the orchestrator itself
  // is PID 1.
  pid_t coordinator = 0;
};

// Runs in the child; returns its exit status. Never returns before the deadline has passed.
int run_node(const NodeJob& job, int control_fd);

// Sends one control message (false when the peer is gone).
bool send_message(int fd, const std::string& text);
// Receives one control message within timeout_ms; "" with *error set on timeout, EOF or failure.
std::string receive_message(int fd, int timeout_ms, std::string* error);

}  // namespace sieve::bench
