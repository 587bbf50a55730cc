// SPDX-License-Identifier: Apache-2.0
// The functions behind ibv_context::ops that verbs.h's inline ibv_post_send, ibv_post_recv and
// ibv_poll_cq call, and what the data path counts for tests (test_hooks.cc).
#pragma once

#include <infiniband/verbs.h>

namespace sieve::fake_verbs {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// Work requests and payload bytes posted so far in this process, by opcode (IBV_WR_*).
void count_posted(ibv_wr_opcode opcode, uint64_t bytes);
void posted_so_far(ibv_wr_opcode opcode, uint64_t* requests, uint64_t* bytes);

}  // namespace sieve::fake_verbs
