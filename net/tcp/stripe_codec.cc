// SPDX-License-Identifier: Apache-2.0
#include "net/tcp/stripe_codec.h"

#include <cstring>

namespace sieve::net {

namespace {
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
constexpr uint32_t kCodecMagic = 0x5A564953;  // "SIVZ" little-endian
}  // namespace

void write_raw_codec_header(uint64_t raw_length, uint8_t* out) {
  put32(out, kCodecMagic);
  out[4] = 1;  // version
  out[5] = 0;  // kind: raw
  out[6] = 1;  // word size of a raw frame
  out[7] = 0;
  put64(out + 8, raw_length);
  put64(out + 16, 0);
}

bool worth_encoding(TransportOptions::Codec mode, const void* data, size_t length) {
  if (mode == TransportOptions::Codec::kOn) return true;
  if (mode == TransportOptions::Codec::kOff || length == 0) return false;
  return compress::estimate(data, length).pays;
}

Status check_codec_header(const uint8_t* header, size_t stripe_length, const std::string& peer, size_t* body,
                          bool* zero_elided) {
  compress::FrameInfo info;
  compress::DecodeStatus st = compress::read_frame_info(header, kCodecHeaderBytes, &info);
  if (st != compress::DecodeStatus::kOk)
    return error(Code::kRemoteError, "corrupt codec frame from " + peer + ": " + compress::decode_status_message(st));
  if (info.raw_length != stripe_length || info.frame_length < kCodecHeaderBytes ||
      info.frame_length > compress::encode_bound(stripe_length) ||
      (!info.zero_elided && info.frame_length != kCodecHeaderBytes + stripe_length))
    return error(Code::kRemoteError, "corrupt codec frame from " + peer + ": it announces " +
                                         std::to_string(info.raw_length) + " bytes in a frame of " +
                                         std::to_string(info.frame_length) + " for a stripe of " +
                                         std::to_string(stripe_length));
  *body = info.frame_length - kCodecHeaderBytes;
  *zero_elided = info.zero_elided;
  return ok_status();
}

Status decode_stripe(const uint8_t* frame, size_t frame_length, char* dst, size_t length, const std::string& peer) {
  size_t out = 0;
  compress::DecodeStatus st = compress::decode(frame, frame_length, dst, length, &out);
  if (st != compress::DecodeStatus::kOk)
    return error(Code::kRemoteError, "corrupt codec frame from " + peer + ": " + compress::decode_status_message(st));
  if (out != length)
    return error(Code::kRemoteError, "corrupt codec frame from " + peer + ": decoded " + std::to_string(out) +
                                         " bytes for a stripe of " + std::to_string(length));
  return ok_status();
}

}  // namespace sieve::net
