// SPDX-License-Identifier: Apache-2.0
// Fuzzes the codec decoder with arbitrary frames and destination sizes. Every SIMD level this CPU
// has must give the same status and the same bytes; ASan checks that nothing outside the input or
// the exactly-sized destination is touched.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compress/codec.h"

using namespace sieve::compress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // First two bytes: destination capacity (0..65535); the rest is the frame.
  const size_t cap = size_t(data[0]) | size_t(data[1]) << 8;
  std::vector<uint8_t> frame(data + 2, data + size);  // exact size: reads past it are caught
  std::vector<uint8_t> reference;
  DecodeStatus reference_status = DecodeStatus::kOk;
  bool first = true;
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!simd_level_supported(level)) continue;
    std::vector<uint8_t> out(cap);
    size_t len = 0;
    const DecodeStatus s = decode(frame.data(), frame.size(), out.empty() ? nullptr : out.data(), cap, &len, level);
    if (s == DecodeStatus::kOk && len > cap) std::abort();
    if (s != DecodeStatus::kOk && len != 0) std::abort();
    out.resize(s == DecodeStatus::kOk ? len : 0);
    if (first) {
      reference = out;
      reference_status = s;
      first = false;
    } else if (s != reference_status || out != reference) {
      std::abort();  // a SIMD path disagrees with the scalar one
    }
  }
  return 0;
}
