// SPDX-License-Identifier: Apache-2.0
// What a work completion in error tells the user, as much as NCCL's IB transport tells: the status
// (text and number), the work it ended, the queue pairs at both ends and their GIDs, the port, the
// vendor's code, and for the errors that have a usual cause, what to check.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "net/ib/ib_setup.h"

namespace sieve::net::ib {

struct CompletionErrorContext {
  std::string work;  // "RDMA write"
  std::string peer;  // address:port of the peer
  std::string port;  // "mlx5_0:1"
  ibv_gid local_gid{};
  ibv_gid remote_gid{};
  uint32_t remote_qpn = 0;  // 0: unknown
  RetryBudget retry;
};

// "fe80::1", "::ffff:10.0.0.1".
std::string gid_text(const ibv_gid& gid);
// The usual cause of `status` and what to do, or "" where there is none to give.
std::string completion_hint(ibv_wc_status status, const RetryBudget& retry);
// One line: "<status_text> (status N) on queue pair Q to <peer> (<work> on <port>, remote queue
// pair R, local GID ..., remote GID ..., vendor error V)" and "; hint: ..." where there is one.
std::string describe_completion_error(const ibv_wc& wc, const char* status_text, const CompletionErrorContext& context);

}  // namespace sieve::net::ib
