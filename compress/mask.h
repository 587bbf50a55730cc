// SPDX-License-Identifier: Apache-2.0
// A sparsity mask over N elements: bit i set = element i is kept (sent), clear = pruned (known zero).
// Stored as a little-endian bitmap of 64-bit words whose bits past N are always zero, so equality,
// hashing and merging can work a word at a time. Builders accept every form trainers produce: byte
// masks, bitmaps, index lists, range lists and PruneX-style structured descriptions of conv weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compress/status.h"

namespace sieve::compress {

struct Range {
  uint64_t start;
  uint64_t length;
  bool operator==(const Range& o) const { return start == o.start && length == o.length; }
};

// The compact description of the kept elements that gather/scatter kernels consume: ranges when kept
// runs are long, indices otherwise (whichever takes fewer 64-bit values).
struct MaskLayout {
  enum class Kind { kRanges, kIndices };
  Kind kind = Kind::kRanges;
  std::vector<Range> ranges;      // kind == kRanges
  std::vector<uint64_t> indices;  // kind == kIndices
};

// Shape of a convolution weight in PyTorch's layout [out_channels, in_channels, kernel...].
struct ConvShape {
  uint64_t out_channels;
  uint64_t in_channels;
  uint64_t kernel_elements;  // product of the spatial kernel dimensions (1 for a linear layer)
};

class Mask {
 public:
  Mask() = default;
  // `count` elements, all kept or all pruned.
  explicit Mask(uint64_t count, bool kept = false);

  // bytes[i] != 0 keeps element i.
  static Mask from_bytes(const uint8_t* bytes, uint64_t count);
  // Element i (element_size little-endian bytes) kept when any of its bits is set: the zero pattern
  // of a host buffer, as the mask tracker consumes it. With ignore_sign_bit (floating-point data)
  // -0.0 counts as zero too: pruned gradients come out as +0.0 or -0.0, and both compare equal.
  static Mask from_nonzero(const void* data, uint64_t count, size_t element_size, bool ignore_sign_bit = false);
  // Bit i of `bits` (LSB first within each byte) keeps element i; bits past count are ignored.
  static Mask from_bitmap(const uint8_t* bits, uint64_t count);
  // The same, into this mask's own storage: no allocation once it has held `count` elements (a
  // learned-mask record read at every call).
  void assign_bitmap(const uint8_t* bits, uint64_t count);
  // Kept elements listed by index (any order, repeats allowed); an index >= count is refused.
  static Status from_indices(uint64_t count, const uint64_t* indices, size_t n, Mask* out);
  // Kept elements as [start, start + length) ranges (any order); ranges past the end or overlapping
  // each other are refused. Empty ranges are allowed and keep nothing.
  static Status from_ranges(uint64_t count, const uint64_t* starts, const uint64_t* lengths, size_t n, Mask* out);
  // Structured pruning: keep whole output filters (keep[o] != 0 for o < out_channels) ...
  static Status from_conv_filters(const ConvShape& shape, const uint8_t* keep, Mask* out);
  // ... or whole input channels (keep[i] != 0 for i < in_channels), in every filter.
  static Status from_conv_input_channels(const ConvShape& shape, const uint8_t* keep, Mask* out);

  // Union: kept where either mask keeps. Both masks must have the same count.
  static Status merge_or(const Mask& a, const Mask& b, Mask* out);

  uint64_t count() const { return count_; }
  uint64_t kept() const { return kept_; }
  double density() const { return count_ ? double(kept_) / double(count_) : 0.0; }
  bool test(uint64_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  // True when any element in [first, last) is kept.
  bool any_kept(uint64_t first, uint64_t last) const;
  const std::vector<uint64_t>& words() const { return words_; }

  // Stable across runs, hosts and builds: depends only on count and the kept set.
  uint64_t hash() const;

  std::vector<Range> runs() const;
  MaskLayout layout() const;
  // Bitmap bytes, LSB first, ceil(count / 8) of them (the C API's format).
  std::vector<uint8_t> to_bitmap() const;

  // Editing, for builders that compose masks (the registry); keeps the kept count right.
  void set_range(uint64_t first, uint64_t n, bool kept);
  // Copies n bits of `src` starting at src_first into this mask starting at first.
  void copy_bits(uint64_t first, const Mask& src, uint64_t src_first, uint64_t n);

  bool operator==(const Mask& o) const { return count_ == o.count_ && words_ == o.words_; }
  bool operator!=(const Mask& o) const { return !(*this == o); }

 private:
  void recount();
  uint64_t count_ = 0;
  uint64_t kept_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace sieve::compress
