// SPDX-License-Identifier: Apache-2.0
// Fuzzes every decoder of what crosses the wire (net/wire.h): the listen handle, hello, welcome,
// proof, the frame header and the chunk header. The first byte picks the decoder; the rest is the
// message, copied to a buffer of its exact size so a read past it is caught. What a decoder accepts
// must encode back to a message that decodes to the same fields.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/wire.h"

using namespace sieve::net;

namespace {

uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 6;
  ++data;
  --size;
  switch (which) {
    case 0: {
      std::vector<uint8_t> in(data, data + std::min(size, wire::kHandleBytes));
      if (in.size() != wire::kHandleBytes) return 0;
      wire::HandleFields h;
      if (!wire::decode_handle(in.data(), &h).ok()) return 0;
      uint8_t out[wire::kHandleBytes];
      wire::encode_handle(h, out);
      wire::HandleFields again;
      check(wire::decode_handle(out, &again).ok());
      check(again.listener_nonce == h.listener_nonce && again.address.text() == h.address.text());
      check(wire::handle_pending(in.data()) == h.pending_connect);
      return 0;
    }
    case 1: {
      std::vector<uint8_t> in(data, data + std::min(size, wire::kHelloBytes));
      if (in.size() != wire::kHelloBytes) return 0;
      wire::Hello h;
      if (!wire::decode_hello(in.data(), &h).ok()) return 0;
      check(h.socket_index <= h.nsocks && h.nsocks <= 16 && h.chunk_size >= 4096);
      uint8_t out[wire::kHelloBytes];
      wire::encode_hello(h, out);
      wire::Hello again;
      check(wire::decode_hello(out, &again).ok());
      check(std::memcmp(&again, &h, sizeof h) == 0 ||
            (again.connection_id == h.connection_id && again.client_nonce == h.client_nonce && again.mac == h.mac));
      // Any prefix of an accepted hello is accepted by the early check.
      check(wire::check_hello_start(in.data(), in[0] % wire::kHelloBytes).ok());
      return 0;
    }
    case 2: {
      std::vector<uint8_t> in(data, data + std::min(size, wire::kWelcomeBytes));
      if (in.size() != wire::kWelcomeBytes) return 0;
      wire::Welcome w;
      if (!wire::decode_welcome(in.data(), &w).ok()) return 0;
      uint8_t out[wire::kWelcomeBytes];
      wire::encode_welcome(w, out);
      wire::Welcome again;
      check(wire::decode_welcome(out, &again).ok() && again.server_nonce == w.server_nonce && again.mac == w.mac &&
            again.refusal == w.refusal);
      return 0;
    }
    case 3: {
      std::vector<uint8_t> in(data, data + std::min(size, wire::kProofBytes));
      if (in.size() != wire::kProofBytes) return 0;
      wire::Proof p;
      if (!wire::decode_proof(in.data(), &p).ok()) return 0;
      uint8_t out[wire::kProofBytes];
      wire::encode_proof(p, out);
      wire::Proof again;
      check(wire::decode_proof(out, &again).ok() && again.mac == p.mac);
      return 0;
    }
    case 4: {  // expected sequence and allowed flags, then the header
      if (size < 12 + wire::kFrameHeaderBytes) return 0;
      const uint64_t sequence = get64(data);
      const uint32_t allowed = static_cast<uint32_t>(get64(data + 4) >> 32);
      std::vector<uint8_t> in(data + 12, data + 12 + wire::kFrameHeaderBytes);
      wire::FrameHeader f;
      if (!wire::decode_frame(in.data(), sequence, allowed, &f).ok()) return 0;
      check(f.sequence == sequence && (f.flags & ~allowed) == 0);
      uint8_t out[wire::kFrameHeaderBytes];
      wire::encode_frame(f, out);
      wire::FrameHeader again;
      check(wire::decode_frame(out, sequence, allowed, &again).ok() && again.length == f.length);
      return 0;
    }
    case 5: {  // the expected chunk, then the header
      if (size < 20 + wire::kChunkHeaderBytes) return 0;
      wire::ChunkHeader expected{static_cast<uint32_t>(get64(data)), get64(data + 4), get64(data + 12)};
      std::vector<uint8_t> in(data + 20, data + 20 + wire::kChunkHeaderBytes);
      if (!wire::check_chunk(in.data(), expected).ok()) return 0;
      uint8_t out[wire::kChunkHeaderBytes];
      wire::encode_chunk(expected, out);
      check(std::memcmp(out, in.data(), wire::kChunkHeaderBytes) == 0 || wire::check_chunk(out, expected).ok());
      return 0;
    }
  }
  return 0;
}
