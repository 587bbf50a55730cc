// The functions behind ibv_context::ops that verbs.h's inline ibv_post_send, ibv_post_recv and
// ibv_poll_cq call. The context is not "extended" (abi_compat is not __VERBS_ABI_IS_EXTENDED), so
// every other inline wrapper takes its legacy path into the exported functions.
#pragma once

#include <infiniband/verbs.h>

namespace sieve::fake_verbs {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

}  // namespace sieve::fake_verbs
