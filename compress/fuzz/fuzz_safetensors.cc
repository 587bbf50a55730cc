// SPDX-License-Identifier: Apache-2.0
// Fuzzes the safetensors mask reader (header length, strict JSON, offsets, shapes). Accepted files
// must be self-consistent; refused ones must say why.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "compress/safetensors.h"

using namespace sieve::compress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);  // exact size: reads past it are caught
  MaskFile f;
  const Status s = masks_from_safetensors(bytes.empty() ? nullptr : bytes.data(), bytes.size(), &f);
  if (!s.ok()) {
    if (s.message().empty()) std::abort();
    return 0;
  }
  uint64_t total = 0, kept = 0;
  for (const MaskTensor& m : f.masks) {
    if (m.first != total || m.kept > m.elements) std::abort();
    total += m.elements;
    kept += m.kept;
  }
  if (total != f.combined.count() || kept != f.combined.kept()) std::abort();
  return 0;
}
