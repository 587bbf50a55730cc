// SPDX-License-Identifier: Apache-2.0
// Fuzzes the encoder: any bytes, any word size and alignment must decode back exactly, and every
// SIMD level must write the scalar path's frame bit for bit.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compress/codec.h"

using namespace sieve::compress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t control = data[0];
  std::vector<uint8_t> storage(data + 1, data + size);
  const size_t align = control & 3;
  const size_t n = storage.size() > align ? storage.size() - align : 0;
  const uint8_t* src = n ? storage.data() + align : nullptr;
  CodecOptions o;
  o.word_size = (control >> 2) % 3 == 0 ? WordSize::kAuto : (control >> 2) % 3 == 1 ? WordSize::kTwo : WordSize::kFour;
  o.max_ratio = (control & 0x80) ? 1e9 : 1.0;
  std::vector<uint8_t> reference;
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!simd_level_supported(level)) continue;
    o.simd = level;
    std::vector<uint8_t> frame(encode_bound(n));
    const size_t written = encode(src, n, frame.data(), frame.size(), o);
    if (written < kFrameHeaderSize || written > frame.size()) std::abort();
    frame.resize(written);
    if (reference.empty()) reference = frame;
    else if (frame != reference) std::abort();
    std::vector<uint8_t> out(n);
    size_t len = 0;
    if (decode(frame.data(), frame.size(), out.empty() ? nullptr : out.data(), n, &len, level) != DecodeStatus::kOk)
      std::abort();
    if (len != n || (n && std::memcmp(out.data(), src, n) != 0)) std::abort();
  }
  return 0;
}
