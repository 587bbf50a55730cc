// SPDX-License-Identifier: Apache-2.0
// The lossless wire codec: removes zero words from any byte buffer, self-describing, exact.
//
// Frame (little-endian):
//   offset 0  u32 magic "SIVZ"      offset 4  u8 version (1)   offset 5  u8 kind (0 raw, 1 zero-elided)
//   offset 6  u8 word size (raw: 1; zero-elided: 2 or 4)        offset 7  u8 reserved (0)
//   offset 8  u64 raw length        offset 16 u64 nonzero words (raw: 0)
//   raw:         the raw bytes
//   zero-elided: bitmap of ceil(W / 8) bytes (bit i, LSB first, set = word i nonzero; padding bits 0),
//                the nonzero words in order, then the raw length % word size trailing bytes verbatim,
//                where W = raw length / word size.
// A frame is zero-elided only when that is not larger than the raw frame, so encode_bound(n) is
// the raw frame's size. Word size 4 suits fp32 data, 2 suits bf16/fp16; Auto samples the buffer.
// The decoder checks every length against the input and the destination and never touches a byte
// outside either, whatever the input.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress {

enum class SimdLevel : uint8_t { kAuto = 0, kScalar, kAvx2, kAvx512 };
enum class WordSize : uint8_t { kAuto = 0, kTwo = 2, kFour = 4 };

const char* simd_level_name(SimdLevel level);
// The best level this CPU runs (never kAuto).
SimdLevel detected_simd_level();
// True when this CPU can run `level` (kAuto and kScalar always).
bool simd_level_supported(SimdLevel level);

struct CodecOptions {
  WordSize word_size = WordSize::kAuto;
  // kAuto = detected_simd_level(); an unsupported level falls back to the best supported below it.
  SimdLevel simd = SimdLevel::kAuto;
  // Zero-elide only when the estimated payload is at most this fraction of the raw bytes.
  double max_ratio = 1.0;
};

constexpr size_t kFrameHeaderSize = 24;
inline size_t encode_bound(size_t n) { return kFrameHeaderSize + n; }

// What the sample-based heuristic expects for a buffer: the better word size and the frame size.
struct Estimate {
  WordSize word_size = WordSize::kFour;  // kAuto when a raw frame is expected to be smaller
  size_t frame_bytes = 0;                // estimated size of the frame encode() would write
  bool pays = false;                     // zero-eliding is expected to beat the raw frame
};
Estimate estimate(const void* src, size_t n, const CodecOptions& options = {});

// Writes one frame for src[0, n) into dst and returns its size, or 0 when dst is null, src is null
// with n > 0, or cap < encode_bound(n).
size_t encode(const void* src, size_t n, void* dst, size_t cap, const CodecOptions& options = {});

enum class DecodeStatus {
  kOk = 0,
  kTruncated,  // fewer bytes than the header or the frame it announces
  kBadMagic,
  kBadVersion,
  kBadHeader,       // unknown kind, word size or nonzero reserved byte, impossible counts
  kTooLarge,        // the raw length does not fit the destination
  kTrailingBytes,   // more input than the frame
  kBitmapMismatch,  // the bitmap does not agree with the nonzero word count, or padding bits set
};
const char* decode_status_message(DecodeStatus status);

struct FrameInfo {
  bool zero_elided = false;
  unsigned word_size = 1;
  uint64_t raw_length = 0;
  uint64_t nonzero_words = 0;
  uint64_t frame_length = 0;  // header included
};
// Reads and checks the header only (n >= kFrameHeaderSize is enough): a receiver learns from it
// how many bytes the frame has and how large the decoded data will be.
DecodeStatus read_frame_info(const void* src, size_t n, FrameInfo* info);

// Decodes the frame src[0, n) (exactly one frame) into dst, which holds cap bytes; *out_len gets
// the raw length. On any error nothing past the frame's checks is trusted and *out_len is 0.
DecodeStatus decode(const void* src, size_t n, void* dst, size_t cap, size_t* out_len,
                    SimdLevel simd = SimdLevel::kAuto);

}  // namespace sieve::compress
