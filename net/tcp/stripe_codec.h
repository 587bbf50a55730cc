// SPDX-License-Identifier: Apache-2.0
// How a stripe travels when its message carries wire::kFlagCodec: its chunk header, then one codec
// frame (compress/codec.h) for the stripe's bytes. A stripe that would not shrink goes as a raw
// codec frame whose payload is sent straight from the user's buffer (no copy). Under `auto` a
// message whose sample says eliding would not pay is sent without the codec flag at all, exactly as
// under `off`: dense data costs one sample per message, not a header and an extra read per stripe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "net/status.h"
#include "net/transport.h"

namespace sieve::net {

constexpr size_t kCodecHeaderBytes = compress::kFrameHeaderSize;

// The header of a raw codec frame holding `raw_length` bytes (the layout compress/codec.h documents).
void write_raw_codec_header(uint64_t raw_length, uint8_t* out);

// Whether the sender zero-elides these bytes (a message, then each of its stripes): always under On,
// when a sample says so under Auto.
bool worth_encoding(TransportOptions::Codec mode, const void* data, size_t length);

// Checks a received codec header against the stripe it must fill; on success *body is the number
// of bytes that follow the header and *zero_elided says whether they need decoding.
Status check_codec_header(const uint8_t* header, size_t stripe_length, const std::string& peer, size_t* body,
                          bool* zero_elided);

// Decodes a whole zero-elided frame into exactly `length` bytes at dst.
Status decode_stripe(const uint8_t* frame, size_t frame_length, char* dst, size_t length, const std::string& peer);

// Helper-thread scratch for encoded (send) or still-encoded (receive) frames, grown on demand.
class ScratchBuffer {
 public:
  uint8_t* get(size_t bytes) {
    if (buffer_.size() < bytes) buffer_.resize(bytes);
    return buffer_.data();
  }

 private:
  std::vector<uint8_t> buffer_;
};

}  // namespace sieve::net
