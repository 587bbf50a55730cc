// SPDX-License-Identifier: Apache-2.0
#include "net/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace sieve::net::wire {

namespace {

constexpr uint32_t kHandleMagic = 0x48564953;   // "SIVH"
constexpr uint32_t kHelloMagic = 0x4c564953;    // "SIVL"
constexpr uint32_t kWelcomeMagic = 0x57564953;  // "SIVW"
constexpr uint32_t kProofMagic = 0x50564953;    // "SIVP"
constexpr uint32_t kFrameMagic = 0x4d564953;    // "SIVM"
constexpr uint32_t kChunkMagic = 0x43564953;    // "SIVC"
constexpr size_t kPendingOffset = 120;
constexpr size_t kHelloMacOffset = 48;  // the hello's fields before it are what its mac covers

void put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

Status bad(const char* what, uint32_t got) {
  char text[96];
  std::snprintf(text, sizeof(text), "bad %s magic 0x%08x", what, got);
  return error(Code::kRemoteError, text);
}

Status other_version(uint16_t got) {
  return error(Code::kRemoteError, "peer speaks Sieve wire version " + std::to_string(got) + ", this library " +
                                       std::to_string(kVersion) + ": run one Sieve release on every node");
}

}  // namespace

void encode_handle(const HandleFields& h, uint8_t* out) {
  std::memset(out, 0, kHandleBytes);
  put32(out, kHandleMagic);
  put16(out + 4, kVersion);
  if (h.address.family() == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&h.address.storage);
    put16(out + 6, 4);
    std::memcpy(out + 16, &in->sin_addr, 4);
  } else {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&h.address.storage);
    put16(out + 6, 6);
    put32(out + 12, in6->sin6_scope_id);
    std::memcpy(out + 16, &in6->sin6_addr, 16);
  }
  put16(out + 8, h.address.port());
  put64(out + 32, h.listener_nonce);
  put64(out + kPendingOffset, h.pending_connect);
}

Status decode_handle(const uint8_t* in, HandleFields* h) {
  if (get32(in) != kHandleMagic) return error(Code::kInvalidArgument, "not a Sieve handle (bad magic)");
  if (get16(in + 4) != kVersion)
    return error(Code::kInvalidArgument, "Sieve handle of version " + std::to_string(get16(in + 4)) +
                                             ", this library speaks " + std::to_string(kVersion));
  *h = HandleFields{};
  uint16_t family = get16(in + 6);
  if (family == 4) {
    sockaddr_in in4{};
    in4.sin_family = AF_INET;
    std::memcpy(&in4.sin_addr, in + 16, 4);
    std::memcpy(&h->address.storage, &in4, sizeof(in4));
    h->address.length = sizeof(in4);
  } else if (family == 6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_scope_id = get32(in + 12);
    std::memcpy(&in6.sin6_addr, in + 16, 16);
    std::memcpy(&h->address.storage, &in6, sizeof(in6));
    h->address.length = sizeof(in6);
  } else {
    return error(Code::kInvalidArgument, "Sieve handle with unknown address family " + std::to_string(family));
  }
  h->address.set_port(get16(in + 8));
  if (h->address.port() == 0) return error(Code::kInvalidArgument, "Sieve handle without a port");
  h->listener_nonce = get64(in + 32);
  h->pending_connect = get64(in + kPendingOffset);
  return ok_status();
}

uint64_t handle_pending(const uint8_t* in) { return get64(in + kPendingOffset); }
void set_handle_pending(uint8_t* in, uint64_t id) { put64(in + kPendingOffset, id); }

void encode_hello(const Hello& h, uint8_t* out) {
  std::memset(out, 0, kHelloBytes);
  put32(out, kHelloMagic);
  put16(out + 4, kVersion);
  put16(out + 6, h.socket_index);
  put16(out + 8, h.nsocks);
  put32(out + 12, h.caps);
  put64(out + 16, h.listener_nonce);
  put64(out + 24, h.connection_id);
  put64(out + 32, h.client_nonce);
  put64(out + 40, h.chunk_size);
  std::memcpy(out + kHelloMacOffset, h.mac.data(), h.mac.size());
}

Status check_hello_start(const uint8_t* in, size_t size) {
  if (size >= 4 && get32(in) != kHelloMagic) return bad("hello", get32(in));
  if (size >= 6 && get16(in + 4) != kVersion) return other_version(get16(in + 4));
  return ok_status();
}

Status decode_hello(const uint8_t* in, Hello* h) {
  Status st = check_hello_start(in, kHelloBytes);
  if (!st.ok()) return st;
  h->socket_index = get16(in + 6);
  h->nsocks = get16(in + 8);
  h->caps = get32(in + 12);
  h->listener_nonce = get64(in + 16);
  h->connection_id = get64(in + 24);
  h->client_nonce = get64(in + 32);
  h->chunk_size = get64(in + 40);
  std::memcpy(h->mac.data(), in + kHelloMacOffset, h->mac.size());
  // A verbs connection is its bootstrap socket alone; a TCP one has 1-16 data sockets besides.
  const bool verbs = (h->caps & kCapVerbs) != 0;
  if ((verbs ? h->nsocks != 0 : h->nsocks < 1) || h->nsocks > 16 || h->socket_index > h->nsocks)
    return error(Code::kRemoteError,
                 "hello with socket " + std::to_string(h->socket_index) + " of " + std::to_string(h->nsocks));
  if (h->chunk_size < 4096 || h->chunk_size > (1ull << 30))
    return error(Code::kRemoteError, "hello with chunk size " + std::to_string(h->chunk_size));
  return ok_status();
}

void encode_welcome(const Welcome& w, uint8_t* out) {
  std::memset(out, 0, kWelcomeBytes);
  put32(out, kWelcomeMagic);
  put16(out + 4, kVersion);
  put32(out + 8, w.caps);
  put32(out + 12, static_cast<uint32_t>(w.refusal));
  put64(out + 16, w.server_nonce);
  std::memcpy(out + 24, w.mac.data(), w.mac.size());
}

Status decode_welcome(const uint8_t* in, Welcome* w) {
  if (get32(in) != kWelcomeMagic) return bad("welcome", get32(in));
  if (get16(in + 4) != kVersion) return other_version(get16(in + 4));
  w->caps = get32(in + 8);
  const uint32_t refusal = get32(in + 12);
  if (refusal > static_cast<uint32_t>(Refusal::kHelloMac))
    return error(Code::kRemoteError, "welcome with unknown refusal " + std::to_string(refusal));
  w->refusal = static_cast<Refusal>(refusal);
  w->server_nonce = get64(in + 16);
  std::memcpy(w->mac.data(), in + 24, w->mac.size());
  return ok_status();
}

void encode_proof(const Proof& p, uint8_t* out) {
  std::memset(out, 0, kProofBytes);
  put32(out, kProofMagic);
  std::memcpy(out + 8, p.mac.data(), p.mac.size());
}

Status decode_proof(const uint8_t* in, Proof* p) {
  if (get32(in) != kProofMagic) return bad("proof", get32(in));
  std::memcpy(p->mac.data(), in + 8, p->mac.size());
  return ok_status();
}

Digest handshake_mac(const std::string& token, Role role, const Hello& hello, uint64_t server_nonce) {
  uint8_t transcript[1 + kHelloBytes + 8];
  transcript[0] = static_cast<uint8_t>(role);
  encode_hello(hello, transcript + 1);
  put64(transcript + 1 + kHelloBytes, server_nonce);
  return hmac_sha256(token, transcript, sizeof(transcript));
}

Digest hello_mac(const std::string& token, const Hello& hello) {
  uint8_t message[1 + kHelloBytes];
  message[0] = static_cast<uint8_t>(Role::kHello);
  encode_hello(hello, message + 1);
  return hmac_sha256(token, message, 1 + kHelloMacOffset);
}

void encode_frame(const FrameHeader& f, uint8_t* out) {
  put32(out, kFrameMagic);
  put32(out + 4, f.flags);
  put64(out + 8, f.sequence);
  put64(out + 16, f.length);
}

Status decode_frame(const uint8_t* in, uint64_t expected_sequence, uint32_t allowed_flags, FrameHeader* f) {
  if (get32(in) != kFrameMagic) return bad("frame", get32(in));
  f->flags = get32(in + 4);
  f->sequence = get64(in + 8);
  f->length = get64(in + 16);
  if (f->sequence != expected_sequence)
    return error(Code::kRemoteError,
                 "frame sequence " + std::to_string(f->sequence) + ", expected " + std::to_string(expected_sequence));
  if (f->flags & ~allowed_flags) {
    char text[64];
    std::snprintf(text, sizeof(text), "frame with unexpected flags 0x%x", f->flags);
    return error(Code::kRemoteError, text);
  }
  return ok_status();
}

void encode_chunk(const ChunkHeader& c, uint8_t* out) {
  put32(out, kChunkMagic);
  put32(out + 4, c.length);
  put64(out + 8, c.sequence);
  put64(out + 16, c.offset);
}

Status check_chunk(const uint8_t* in, const ChunkHeader& expected) {
  if (get32(in) != kChunkMagic) return bad("chunk", get32(in));
  if (get32(in + 4) != expected.length || get64(in + 8) != expected.sequence || get64(in + 16) != expected.offset)
    return error(Code::kRemoteError, "chunk header out of step with the stream (message " +
                                         std::to_string(get64(in + 8)) + " offset " + std::to_string(get64(in + 16)) +
                                         ", expected message " + std::to_string(expected.sequence) + " offset " +
                                         std::to_string(expected.offset) + ")");
  return ok_status();
}

StripePlan plan_stripes(uint64_t length, int nsocks, uint64_t chunk_size) {
  StripePlan plan;
  if (length == 0) return plan;
  uint64_t per_socket = (length + nsocks - 1) / nsocks;
  uint64_t chunk = std::max<uint64_t>(kMinStripe, std::min<uint64_t>(chunk_size, per_socket));
  chunk = (chunk + 4095) & ~uint64_t(4095);
  plan.chunk = chunk;
  plan.count = (length + chunk - 1) / chunk;
  return plan;
}

}  // namespace sieve::net::wire
