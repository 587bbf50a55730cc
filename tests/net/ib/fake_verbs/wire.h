// SPDX-License-Identifier: Apache-2.0
// What travels between a requester QP and the responder QP's device endpoint: one unix stream per
// requester QP, requests one way, responses the other, in order. Both ends are on one machine and
// built from one source, so structs go as they are.
#pragma once

#include <cstdint>

namespace sieve::fake_verbs {

enum class MsgType : uint32_t {
  // requester -> responder
  kHello = 1,  // payload: Hello; first on every connection
  kWrite,      // payload: the bytes to write at remote_addr
  kWriteImm,   // the same, then consumes a posted receive
  kSend,       // payload: the message for the next posted receive
  kSendImm,
  kRead,  // no payload; length bytes from remote_addr
  // responder -> requester
  kAck,           // the request `seq` is done
  kReadResponse,  // payload: the bytes read
  kNak,           // the request `seq` failed with `status`; payload: a violation text (may be empty)
};

struct MsgHeader {
  uint32_t type = 0;
  uint32_t status = 0;  // ibv_wc_status, for kNak
  uint64_t seq = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;  // payload bytes that follow; for kRead the bytes asked for
  uint32_t rkey = 0;
  uint32_t imm = 0;  // network order
};

struct Hello {
  uint32_t pid = 0;
  uint32_t device_index = 0;  // the requester port's address index
  uint32_t link = 0;          // LinkLayer
  uint32_t lid = 0;
  uint32_t gid_type = 0;  // the type of the requester's sgid_index (RoCE)
  uint32_t qpn = 0;
  uint32_t dest_qpn = 0;
  uint32_t sq_psn = 0;
  uint64_t subnet_prefix = 0;  // the requester port's (IB)
  uint32_t is_global = 0;      // the requester's packets carry a GRH
  uint32_t pkey = 0;           // the P_Key at the requester QP's pkey_index
  uint32_t rnr_retry = 0;      // the requester's: 7 retries forever
  uint32_t dlid = 0;           // IB: the DLID the requester's packets carry (its RTR dlid)
  uint32_t flid = 0;           // IB: the requester port's FLID (routed IB), 0 if none
  uint32_t reserved = 0;
};

constexpr uint64_t kMaxTextPayload = 1024;

}  // namespace sieve::fake_verbs
