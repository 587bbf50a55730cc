// SPDX-License-Identifier: Apache-2.0
// Internal to the verbs comms (ib_comm.cc, ib_comm_progress.cc, ib_send_comm.cc, ib_recv_comm.cc):
// the work request ids, the queue depths and the layout of the control messages both sides read.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "net/ib/ib_comm.h"
#include "net/socket.h"

namespace sieve::net::ib {

// Work request ids: what completed, for which request slot, on which queue pair.
// Write: a write with the immediate (signaled); WriteData: the data ahead of a zero-byte Write
// under adaptive routing (unsignaled: it completes only in error).
enum class Work : uint64_t {
  kAnnounceRecv = 1,
  kWrite = 2,
  kDataRecv = 3,
  kAnnounceSend = 4,
  kFlushRead = 5,
  kWriteData = 6
};
inline uint64_t work_id(Work kind, uint32_t index, int qp) {
  return (static_cast<uint64_t>(kind) << 56) | (uint64_t(index) << 8) | static_cast<uint64_t>(qp);
}
inline Work work_kind(uint64_t id) { return static_cast<Work>(id >> 56); }
inline uint32_t work_index(uint64_t id) { return static_cast<uint32_t>((id >> 8) & 0xffff); }
inline int work_qp(uint64_t id) { return static_cast<int>(id & 0xff); }
inline const char* work_name(Work kind) {
  switch (kind) {
    case Work::kAnnounceRecv: return "receive of a slot announcement";
    case Work::kWrite: return "RDMA write";
    case Work::kWriteData: return "RDMA write";
    case Work::kDataRecv: return "receive of an RDMA write's immediate";
    case Work::kAnnounceSend: return "send of a slot announcement";
    case Work::kFlushRead: return "flush read";
  }
  return "work request";
}

// Queue depths: at most kMaxRequests messages are in flight per comm, each posting at most one
// work request per queue pair; the send queue also holds announcements whose completion is not
// polled yet. The completion queue holds everything all queues can complete at once.
constexpr int kRecvDepth = kMaxRequests;
constexpr int kSendDepth = 2 * kMaxRequests;

// The immediate of a write into a receive that is too small: bit 31, which no size below
// kMaxMessageBytes sets. The receiver fails its request; the sender fails its own.
constexpr uint32_t kImmTooLarge = 0x80000000u;

constexpr uint32_t kAnnounceMagic = 0x41564953;  // "SIVA"
constexpr uint32_t kGoodbyeMagic = 0x47564953;   // "SIVG"
constexpr auto kLivenessInterval = std::chrono::milliseconds(50);
// A peer's socket may close right after its last message: completions still in the queue win.
constexpr auto kCloseGrace = std::chrono::milliseconds(100);

inline int qps_for(size_t capacity, int nqps) {
  const size_t wanted = (capacity + kSplitBytesPerQp - 1) / kSplitBytesPerQp;
  return static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(nqps)));
}

inline uint32_t random_psn() { return static_cast<uint32_t>(random64() & 0xffffff); }

inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline std::string bytes_text(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace sieve::net::ib
