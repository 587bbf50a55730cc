// SPDX-License-Identifier: Apache-2.0
#include "compress/codec.h"

#include <algorithm>
#include <cstring>

#include "compress/codec_kernels.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the frame format assumes a little-endian host");

namespace sieve::compress {
namespace {

constexpr uint32_t kMagic = 0x5A564953;  // "SIVZ" in memory
constexpr uint8_t kVersion = 1;
constexpr uint8_t kKindRaw = 0, kKindZeroElided = 1;

// Buffers up to this size are counted whole by the estimate; larger ones are sampled.
constexpr size_t kExactEstimateBytes = 8192;
constexpr size_t kSampleWindows = 64, kSampleWindowBytes = 64;

template <typename T> T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T> void store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof v); }

void write_header(uint8_t* dst, uint8_t kind, uint8_t word_size, uint64_t raw_length, uint64_t nonzero_words) {
  store<uint32_t>(dst, kMagic);
  dst[4] = kVersion;
  dst[5] = kind;
  dst[6] = word_size;
  dst[7] = 0;
  store<uint64_t>(dst + 8, raw_length);
  store<uint64_t>(dst + 16, nonzero_words);
}

SimdLevel resolve(SimdLevel requested) {
  const SimdLevel best = detected_simd_level();
  if (requested == SimdLevel::kAuto || uint8_t(requested) > uint8_t(best)) return best;
  return requested;
}

size_t write_raw(const uint8_t* src, size_t n, uint8_t* dst) {
  write_header(dst, kKindRaw, 1, n, 0);
  if (n) std::memcpy(dst + kFrameHeaderSize, src, n);
  return kFrameHeaderSize + n;
}

// Payload bytes (bitmap, packed words, tail) of a zero-elided frame with `nonzero` nonzero words.
size_t elided_payload(size_t n, unsigned word_size, size_t nonzero) {
  const size_t words = n / word_size;
  return (words + 7) / 8 + nonzero * word_size + n % word_size;
}

struct ZeroCounts {
  size_t words4 = 0, nonzero4 = 0, words2 = 0, nonzero2 = 0;
};

void count_window(const uint8_t* p, size_t bytes, ZeroCounts& z) {
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    ++z.words4;
    z.nonzero4 += load<uint32_t>(p + i) != 0;
  }
  for (size_t i = 0; i + 2 <= bytes; i += 2) {
    ++z.words2;
    z.nonzero2 += load<uint16_t>(p + i) != 0;
  }
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAuto: return "auto";
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "unknown";
}

SimdLevel detected_simd_level() {
#if defined(__x86_64__)
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return SimdLevel::kAvx512;
    return avx2 ? SimdLevel::kAvx2 : SimdLevel::kScalar;
  }();
  return level;
#else
  return SimdLevel::kScalar;
#endif
}

bool simd_level_supported(SimdLevel level) { return uint8_t(level) <= uint8_t(detected_simd_level()); }

Estimate estimate(const void* src_void, size_t n, const CodecOptions& options) {
  const auto* src = static_cast<const uint8_t*>(src_void);
  Estimate e;
  e.word_size = WordSize::kAuto;
  e.frame_bytes = kFrameHeaderSize + n;
  if (!src || n < 2) return e;

  ZeroCounts z;
  if (n <= kExactEstimateBytes) {
    count_window(src, n, z);
  } else {
    // Evenly spaced windows, each starting on a 4-byte boundary of the buffer so that both word
    // sizes see the same alignment the encoder will use.
    for (size_t k = 0; k < kSampleWindows; ++k) {
      const size_t at = (k * (n - kSampleWindowBytes) / (kSampleWindows - 1)) & ~size_t{3};
      count_window(src + at, kSampleWindowBytes, z);
    }
  }
  size_t best = n;  // raw payload
  for (unsigned ws : {4u, 2u}) {
    if (options.word_size != WordSize::kAuto && unsigned(options.word_size) != ws) continue;
    const size_t sampled = ws == 4 ? z.words4 : z.words2, nonzero = ws == 4 ? z.nonzero4 : z.nonzero2;
    if (!sampled) continue;
    const size_t words = n / ws;
    const size_t expected_nonzero = size_t(double(nonzero) / double(sampled) * double(words) + 0.5);
    const size_t payload = elided_payload(n, ws, std::min(expected_nonzero, words));
    if (payload <= best && double(payload) <= options.max_ratio * double(n)) {
      best = payload;
      e.word_size = WordSize(ws);
      e.pays = true;
    }
  }
  e.frame_bytes = kFrameHeaderSize + best;
  return e;
}

size_t encode(const void* src_void, size_t n, void* dst_void, size_t cap, const CodecOptions& options) {
  const auto* src = static_cast<const uint8_t*>(src_void);
  auto* dst = static_cast<uint8_t*>(dst_void);
  if (!dst || (!src && n) || cap < encode_bound(n)) return 0;

  const Estimate e = estimate(src, n, options);
  if (!e.pays) return write_raw(src, n, dst);
  const unsigned ws = unsigned(e.word_size);
  const size_t words = n / ws, tail = n % ws, bitmap_bytes = (words + 7) / 8;
  if (bitmap_bytes + tail >= n) return write_raw(src, n, dst);

  detail::EncodeCursor c{};
  c.src = src;
  c.words = words;
  c.bitmap = dst + kFrameHeaderSize;
  c.payload = c.out = c.bitmap + bitmap_bytes;
  c.limit = dst + cap;
  c.budget = n - bitmap_bytes - tail;
  c.done = 0;
  bool fits = true;
  switch (resolve(options.simd)) {
    case SimdLevel::kAvx512: fits = detail::encode_avx512(c, ws); break;
    case SimdLevel::kAvx2: fits = detail::encode_avx2(c, ws); break;
    default: break;
  }
  if (fits) fits = detail::encode_scalar(c, ws);
  if (!fits || size_t(c.out - c.payload) > c.budget) return write_raw(src, n, dst);

  const size_t packed = size_t(c.out - c.payload);
  if (tail) std::memcpy(c.out, src + words * ws, tail);
  write_header(dst, kKindZeroElided, uint8_t(ws), n, packed / ws);
  return kFrameHeaderSize + bitmap_bytes + packed + tail;
}

const char* decode_status_message(DecodeStatus status) {
  switch (status) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kTruncated: return "frame truncated: fewer bytes than its header announces";
    case DecodeStatus::kBadMagic: return "not a Sieve codec frame (bad magic)";
    case DecodeStatus::kBadVersion: return "unsupported codec frame version";
    case DecodeStatus::kBadHeader: return "invalid codec frame header (kind, word size, reserved byte or counts)";
    case DecodeStatus::kTooLarge: return "decoded frame would not fit the destination buffer";
    case DecodeStatus::kTrailingBytes: return "bytes after the end of the codec frame";
    case DecodeStatus::kBitmapMismatch: return "codec frame bitmap disagrees with its nonzero word count";
  }
  return "unknown codec status";
}

DecodeStatus read_frame_info(const void* src_void, size_t n, FrameInfo* info) {
  const auto* src = static_cast<const uint8_t*>(src_void);
  if (!src || n < kFrameHeaderSize) return DecodeStatus::kTruncated;
  if (load<uint32_t>(src) != kMagic) return DecodeStatus::kBadMagic;
  if (src[4] != kVersion) return DecodeStatus::kBadVersion;
  const uint8_t kind = src[5], ws = src[6];
  FrameInfo f;
  f.raw_length = load<uint64_t>(src + 8);
  f.nonzero_words = load<uint64_t>(src + 16);
  f.word_size = ws;
  if (src[7] != 0) return DecodeStatus::kBadHeader;
  if (kind == kKindRaw) {
    if (ws != 1 || f.nonzero_words != 0 || f.raw_length > UINT64_MAX - kFrameHeaderSize)
      return DecodeStatus::kBadHeader;
    f.frame_length = kFrameHeaderSize + f.raw_length;
  } else if (kind == kKindZeroElided) {
    if (ws != 2 && ws != 4) return DecodeStatus::kBadHeader;
    const uint64_t words = f.raw_length / ws;
    if (f.nonzero_words > words) return DecodeStatus::kBadHeader;
    // No overflow: every term is at most raw_length / 8 + raw_length, and raw_length / ws <= 2^63.
    const unsigned __int128 length = (unsigned __int128)kFrameHeaderSize + (words + 7) / 8 +
                                     (unsigned __int128)f.nonzero_words * ws + f.raw_length % ws;
    if (length > UINT64_MAX) return DecodeStatus::kBadHeader;
    f.frame_length = uint64_t(length);
    f.zero_elided = true;
  } else {
    return DecodeStatus::kBadHeader;
  }
  if (info) *info = f;
  return DecodeStatus::kOk;
}

DecodeStatus decode(const void* src_void, size_t n, void* dst_void, size_t cap, size_t* out_len, SimdLevel simd) {
  const auto* src = static_cast<const uint8_t*>(src_void);
  auto* dst = static_cast<uint8_t*>(dst_void);
  if (out_len) *out_len = 0;
  if (!dst) cap = 0;
  FrameInfo f;
  DecodeStatus s = read_frame_info(src, n, &f);
  if (s != DecodeStatus::kOk) return s;
  if (n < f.frame_length) return DecodeStatus::kTruncated;
  if (n > f.frame_length) return DecodeStatus::kTrailingBytes;
  if (f.raw_length > cap) return DecodeStatus::kTooLarge;
  const uint8_t* body = src + kFrameHeaderSize;
  if (!f.zero_elided) {
    if (f.raw_length) std::memcpy(dst, body, f.raw_length);
    if (out_len) *out_len = f.raw_length;
    return DecodeStatus::kOk;
  }

  const unsigned ws = f.word_size;
  const size_t words = f.raw_length / ws, bitmap_bytes = (words + 7) / 8;
  // The kernels trust the bitmap: check it agrees with the header before they run.
  if (words % 8 && (body[bitmap_bytes - 1] >> (words % 8)) != 0) return DecodeStatus::kBitmapMismatch;
  const SimdLevel level = resolve(simd);
  const uint64_t bits = level == SimdLevel::kScalar ? detail::popcount_scalar(body, bitmap_bytes)
                                                    : detail::popcount_fast(body, bitmap_bytes);
  if (bits != f.nonzero_words) return DecodeStatus::kBitmapMismatch;

  detail::DecodeCursor c{};
  c.bitmap = body;
  c.in = body + bitmap_bytes;
  c.in_end = src + n;
  c.dst = dst;
  c.words = words;
  c.done = 0;
  switch (level) {
    case SimdLevel::kAvx512: detail::decode_avx512(c, ws); break;
    case SimdLevel::kAvx2: detail::decode_avx2(c, ws); break;
    default: break;
  }
  detail::decode_scalar(c, ws);
  const size_t tail = f.raw_length % ws;
  if (tail) std::memcpy(dst + words * ws, c.in, tail);
  if (out_len) *out_len = f.raw_length;
  return DecodeStatus::kOk;
}

}  // namespace sieve::compress
