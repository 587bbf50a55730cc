// SPDX-License-Identifier: Apache-2.0
// What the RC engine's two ends (requester.cc, responder.cc) and its loop (service.cc) share: how
// work requests map onto wire.h's messages, the service thread's budgets, and the timers real
// hardware runs (transport retry, RNR retry), in the IB encodings the QP attributes use.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "tests/net/ib/fake_verbs/connection.h"

namespace sieve::fake_verbs {

constexpr size_t kIoBudget = 8u << 20;  // per connection per turn, so one big transfer cannot starve others
constexpr int kMessagesPerTurn = 256;

[[noreturn]] void internal_error(const char* what);

ibv_wc_opcode send_wc_opcode(ibv_wr_opcode opcode);
MsgType request_type(ibv_wr_opcode opcode);

// A responder that read a header it cannot act on yet (no receive posted, QP not ready).
inline bool input_blocked(const Connection* conn) {
  return conn->header_bytes == sizeof(MsgHeader) && !conn->header_taken;
}

using Clock = std::chrono::steady_clock;

// How long a requester retries an unanswered request before it completes with IBV_WC_RETRY_EXC_ERR:
// (retry_cnt + 1) tries of 4.096 us x 2^timeout each. Timeout 0 is "infinite" (Clock::duration::max).
Clock::duration transport_retry_budget(uint8_t timeout, uint8_t retry_cnt);
// How long a sender retries a receiver without a posted receive before IBV_WC_RNR_RETRY_EXC_ERR:
// (rnr_retry + 1) waits of the responder's min_rnr_timer (IB encoding: 0 is 655.36 ms, 1 is 0.01 ms,
// up to 31, 491.52 ms). rnr_retry 7 is "forever" (Clock::duration::max).
Clock::duration rnr_retry_budget(uint8_t rnr_retry, uint8_t min_rnr_timer);

}  // namespace sieve::fake_verbs
