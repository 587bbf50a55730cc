// SPDX-License-Identifier: Apache-2.0
// Reads safetensors files (8-byte little-endian header length N, N bytes of JSON describing each
// tensor's dtype, shape and [begin, end) offsets into the data that follows) and turns their BOOL
// and U8 tensors into masks: nonzero = kept, tensors concatenated in data-offset order. Everything
// is checked against the file; a malformed file is refused with a message naming the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compress/mask.h"
#include "compress/status.h"

namespace sieve::compress {

// The JSON header of a mask file: far below safetensors' own 100 MB limit. A header spends about 100
// to 150 bytes per tensor (name, dtype, shape, offsets); a mask file holds at most one tensor per
// weight, and the largest open checkpoints have about 1e5 tensors: a few MB (a 70B Llama: 723).
constexpr uint64_t kMaxSafetensorsHeader = 16u << 20;
// A tensor's rank: PyTorch's kernels stop at 25 dimensions.
constexpr size_t kMaxTensorRank = 64;
// The JSON values of one header entry: a tensor needs 6 plus its rank; __metadata__ one per string.
// The header is read entry by entry (compress/json.h), so its memory is this many values at a time,
// plus what the tensors keep: a few times the header's size, never the 70 times of a whole tree.
constexpr size_t kMaxHeaderEntryValues = 4096;

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  uint64_t elements = 0;
};

struct SafetensorsView {
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::vector<std::pair<std::string, std::string>> metadata;
  const uint8_t* data = nullptr;  // the data section (points into the parsed bytes)
  uint64_t data_size = 0;
};

// Bytes per element of a safetensors dtype name, 0 when unknown.
size_t safetensors_dtype_size(const std::string& dtype);

Status parse_safetensors(const uint8_t* bytes, size_t size, SafetensorsView* out);

struct MaskTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t first = 0;  // index of its first element in the combined mask
  uint64_t elements = 0;
  uint64_t kept = 0;
};

struct MaskFile {
  std::vector<MaskTensor> masks;
  std::vector<TensorInfo> skipped;  // tensors of other dtypes, not masks
  Mask combined;                    // every mask tensor, in data-offset order
};

Status masks_from_safetensors(const uint8_t* bytes, size_t size, MaskFile* out);
// Reads the whole file first, so only a regular file of at most max_bytes (0: the default limit).
Status load_mask_file(const std::string& path, MaskFile* out, uint64_t max_bytes = 0);
// A quarter of physical memory, at most 16 GiB.
uint64_t default_mask_file_limit();

}  // namespace sieve::compress
