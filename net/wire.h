// SPDX-License-Identifier: Apache-2.0
// Everything Sieve puts on the wire, with explicit little-endian encoding and full validation:
// the listen handle (carried by NCCL's bootstrap), the per-socket handshake (hello, welcome, proof),
// the per-message frame header on the control socket and the chunk header on the data sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "net/devices.h"
#include "net/sha256.h"
#include "net/status.h"

namespace sieve::net::wire {

// Carried by the handle and every handshake message; peers of different versions refuse each other
// with a message naming both. 2: the hello carries a keyed hash, the welcome a refusal.
constexpr uint16_t kVersion = 2;

// Capability bits, offered in hello and welcome; a connection uses the intersection.
constexpr uint32_t kCapZeroElide = 1u << 0;  // understands kFlagCodec messages (unless SIEVE_WIRE_CODEC=off)
// Not a capability but the carrier: set by the verbs transport, whose connection is one bootstrap
// socket and queue pairs. Both sides must agree (a TCP peer would wait for data sockets forever).
constexpr uint32_t kCapVerbs = 1u << 1;

// Frame flags; a flag outside the connection's negotiated set is a protocol error.
constexpr uint32_t kFlagInline = 1u << 0;  // payload follows the header on the control socket
constexpr uint32_t kFlagCodec = 1u << 1;   // payload is codec-encoded (needs kCapZeroElide)

// ---- handle: 128 bytes, written by listen, read (and annotated) by connect ----
struct HandleFields {
  SocketAddress address;         // listener's address and port
  uint64_t listener_nonce = 0;   // a connection must present it, so strays and stale peers are refused
  uint64_t pending_connect = 0;  // connector-local: id of the in-progress connect (0: none)
};
constexpr size_t kHandleBytes = 128;
void encode_handle(const HandleFields& h, uint8_t* out);
Status decode_handle(const uint8_t* in, HandleFields* h);
// The connector-local field lives at a fixed offset so connect can update it in place.
uint64_t handle_pending(const uint8_t* in);
void set_handle_pending(uint8_t* in, uint64_t id);

// ---- handshake, one exchange per socket ----
struct Hello {            // connector -> listener
  uint16_t socket_index;  // 0: control socket; 1..nsocks: data sockets
  uint16_t nsocks;
  uint32_t caps;
  uint64_t listener_nonce;
  uint64_t connection_id;  // groups the sockets of one connection
  uint64_t client_nonce;
  uint64_t chunk_size;  // the sender's stripe size: the receiver plans chunks the same way
  // Keyed hash of everything above (hello_mac): the listener tells a peer that knows the job token
  // from one that only saw the nonce in NCCL's handle before it answers or keeps a place for it.
  Digest mac{};
};
constexpr size_t kHelloBytes = 80;
void encode_hello(const Hello& h, uint8_t* out);
Status decode_hello(const uint8_t* in, Hello* h);
// What the first `size` bytes of a hello (fewer than kHelloBytes allowed) already refuse: another
// magic or version. Lets the listener answer a peer of another version before it waits for more.
Status check_hello_start(const uint8_t* in, size_t size);

// Why a listener refuses a hello it answers (else it sends nothing and closes).
enum class Refusal : uint32_t {
  kNone = 0,
  kHelloMac = 1,  // the hello's keyed hash is wrong: the job tokens differ, or one side has none
};

struct Welcome {  // listener -> connector
  uint32_t caps;
  uint64_t server_nonce;
  Digest mac;                        // proves the listener knows the job token (keyed hash of the transcript)
  Refusal refusal = Refusal::kNone;  // not kNone: the rest is zero and the listener closes
};
constexpr size_t kWelcomeBytes = 56;
void encode_welcome(const Welcome& w, uint8_t* out);
Status decode_welcome(const uint8_t* in, Welcome* w);

struct Proof {  // connector -> listener
  Digest mac;
};
constexpr size_t kProofBytes = 40;
void encode_proof(const Proof& p, uint8_t* out);
Status decode_proof(const uint8_t* in, Proof* p);

// Keyed hash binding both nonces, the connection and the socket; role separates the two directions
// (and the hello's own, which binds every field of the hello but its mac).
enum class Role : uint8_t { kListener = 1, kConnector = 2, kHello = 3 };
Digest handshake_mac(const std::string& token, Role role, const Hello& hello, uint64_t server_nonce);
Digest hello_mac(const std::string& token, const Hello& hello);

// ---- frames ----
struct FrameHeader {  // control socket, one per message
  uint32_t flags;
  uint64_t sequence;
  uint64_t length;  // logical payload bytes (with kFlagCodec: each stripe is one codec frame of its bytes)
};
constexpr size_t kFrameHeaderBytes = 24;
void encode_frame(const FrameHeader& f, uint8_t* out);
// Checks magic, sequence, flags against the negotiated set; the caller checks length vs capacity.
Status decode_frame(const uint8_t* in, uint64_t expected_sequence, uint32_t allowed_flags, FrameHeader* f);

struct ChunkHeader {  // data sockets, one per stripe
  uint32_t length;
  uint64_t sequence;
  uint64_t offset;
};
constexpr size_t kChunkHeaderBytes = 24;
void encode_chunk(const ChunkHeader& c, uint8_t* out);
Status check_chunk(const uint8_t* in, const ChunkHeader& expected);

// How a message of `length` bytes is striped: chunks of `chunk` bytes (the last one shorter).
// Both sides compute it from the frame header and the sender's parameters, so it never travels.
struct StripePlan {
  size_t chunk = 0;
  size_t count = 0;
};
StripePlan plan_stripes(uint64_t length, int nsocks, uint64_t chunk_size);
constexpr uint64_t kMinStripe = 64 * 1024;

}  // namespace sieve::net::wire
