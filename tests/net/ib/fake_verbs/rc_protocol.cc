// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/rc_protocol.h"

#include <cstdio>
#include <cstdlib>

namespace sieve::fake_verbs {

void internal_error(const char* what) {
  std::fprintf(stderr, "fake-verbs: internal error: %s\n", what);
  std::abort();
}

ibv_wc_opcode send_wc_opcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    default: return IBV_WC_RDMA_WRITE;
  }
}

MsgType request_type(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE_WITH_IMM: return MsgType::kWriteImm;
    case IBV_WR_SEND: return MsgType::kSend;
    case IBV_WR_SEND_WITH_IMM: return MsgType::kSendImm;
    case IBV_WR_RDMA_READ: return MsgType::kRead;
    default: return MsgType::kWrite;
  }
}

Clock::duration transport_retry_budget(uint8_t timeout, uint8_t retry_cnt) {
  if (timeout == 0 || timeout > 31) return Clock::duration::max();
  const auto per_try = std::chrono::nanoseconds(4096) * (uint64_t{1} << timeout);
  return std::chrono::duration_cast<Clock::duration>(per_try * (retry_cnt + 1));
}

Clock::duration rnr_retry_budget(uint8_t rnr_retry, uint8_t min_rnr_timer) {
  if (rnr_retry >= 7) return Clock::duration::max();
  // IB spec table 45 (RNR NAK timer field), in microseconds.
  static constexpr uint32_t kTimerUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                            160,    240,   320,   480,    640,    960,    1280,   1920,
                                            2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                            40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(kTimerUs[min_rnr_timer & 31]) * (rnr_retry + 1);
}

}  // namespace sieve::fake_verbs
