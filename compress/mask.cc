// SPDX-License-Identifier: Apache-2.0
#include "compress/mask.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

namespace sieve::compress {
namespace {

// Written so that no count, however large, wraps: the caller's count is untrusted.
uint64_t word_count(uint64_t bits) { return bits / 64 + (bits % 64 != 0); }

// Mask of the low `n` bits (n in 0..64).
uint64_t low_bits(unsigned n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* product) { return __builtin_mul_overflow(a, b, product); }

Status conv_elements(const ConvShape& shape, const uint8_t* keep, uint64_t* total) {
  uint64_t per_filter = 0;
  if (!keep) return error(Code::kInvalidArgument, "conv mask: keep list is null");
  if (shape.out_channels == 0 || shape.in_channels == 0 || shape.kernel_elements == 0)
    return error(Code::kInvalidArgument, "conv mask: every dimension must be at least 1");
  if (mul_overflows(shape.in_channels, shape.kernel_elements, &per_filter) ||
      mul_overflows(per_filter, shape.out_channels, total))
    return error(Code::kOutOfRange, "conv mask: element count overflows 64 bits");
  return ok_status();
}

}  // namespace

Mask::Mask(uint64_t count, bool kept) : count_(count), words_(word_count(count), kept ? ~uint64_t{0} : 0) {
  if (kept && count % 64) words_.back() = low_bits(count % 64);
  kept_ = kept ? count : 0;
}

Mask Mask::from_bytes(const uint8_t* bytes, uint64_t count) {
  Mask m(count);
  for (uint64_t w = 0; w < m.words_.size(); ++w) {
    uint64_t word = 0;
    const uint64_t base = w * 64, n = std::min<uint64_t>(64, count - base);
    for (uint64_t b = 0; b < n; ++b) word |= uint64_t(bytes[base + b] != 0) << b;
    m.words_[w] = word;
  }
  m.recount();
  return m;
}

Mask Mask::from_nonzero(const void* data, uint64_t count, size_t element_size, bool ignore_sign_bit) {
  Mask m(count);
  const auto* bytes = static_cast<const uint8_t*>(data);
  const uint8_t top_byte_bits = ignore_sign_bit ? 0x7F : 0xFF;
  for (uint64_t w = 0; w < m.words_.size(); ++w) {
    uint64_t word = 0;
    const uint64_t base = w * 64, n = std::min<uint64_t>(64, count - base);
    for (uint64_t b = 0; b < n; ++b) {
      const uint8_t* e = bytes + (base + b) * element_size;
      bool nonzero = false;
      for (size_t k = 0; k + 1 < element_size; ++k) nonzero |= e[k] != 0;
      nonzero |= (e[element_size - 1] & top_byte_bits) != 0;
      word |= uint64_t(nonzero) << b;
    }
    m.words_[w] = word;
  }
  m.recount();
  return m;
}

Mask Mask::from_bitmap(const uint8_t* bits, uint64_t count) {
  Mask m;
  m.assign_bitmap(bits, count);
  return m;
}

void Mask::assign_bitmap(const uint8_t* bits, uint64_t count) {
  count_ = count;
  words_.assign(word_count(count), 0);  // keeps the capacity it has
  const uint64_t full_bytes = count / 8;
  if (full_bytes) std::memcpy(words_.data(), bits, full_bytes);  // little-endian words
  if (count % 8) {
    const uint8_t last = bits[full_bytes] & uint8_t(low_bits(count % 8));
    words_[full_bytes / 8] |= uint64_t(last) << (8 * (full_bytes % 8));
  }
  recount();
}

Status Mask::from_indices(uint64_t count, const uint64_t* indices, size_t n, Mask* out) {
  if (n && !indices) return error(Code::kInvalidArgument, "index list is null");
  Mask m(count);
  for (size_t k = 0; k < n; ++k) {
    if (indices[k] >= count)
      return error(Code::kOutOfRange, "index " + std::to_string(indices[k]) + " (entry " + std::to_string(k) +
                                          ") is past the end (" + std::to_string(count) + " elements)");
    m.words_[indices[k] >> 6] |= uint64_t{1} << (indices[k] & 63);
  }
  m.recount();
  *out = std::move(m);
  return ok_status();
}

Status Mask::from_ranges(uint64_t count, const uint64_t* starts, const uint64_t* lengths, size_t n, Mask* out) {
  if (n && (!starts || !lengths)) return error(Code::kInvalidArgument, "range list is null");
  for (size_t k = 0; k < n; ++k) {
    if (starts[k] > count || lengths[k] > count - starts[k])
      return error(Code::kOutOfRange, "range " + std::to_string(k) + " [" + std::to_string(starts[k]) + ", +" +
                                          std::to_string(lengths[k]) + ") is past the end (" + std::to_string(count) +
                                          " elements)");
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return starts[a] < starts[b]; });
  uint64_t previous_end = 0;
  size_t previous = n;
  for (size_t k : order) {
    if (lengths[k] == 0) continue;
    if (previous != n && starts[k] < previous_end)
      return error(Code::kOutOfRange, "range " + std::to_string(k) + " overlaps range " + std::to_string(previous));
    previous_end = starts[k] + lengths[k];
    previous = k;
  }
  Mask m(count);
  for (size_t k = 0; k < n; ++k) m.set_range(starts[k], lengths[k], true);
  *out = std::move(m);
  return ok_status();
}

Status Mask::from_conv_filters(const ConvShape& shape, const uint8_t* keep, Mask* out) {
  uint64_t total = 0;
  Status s = conv_elements(shape, keep, &total);
  if (!s.ok()) return s;
  const uint64_t per_filter = shape.in_channels * shape.kernel_elements;
  Mask m(total);
  for (uint64_t o = 0; o < shape.out_channels; ++o)
    if (keep[o]) m.set_range(o * per_filter, per_filter, true);
  *out = std::move(m);
  return ok_status();
}

Status Mask::from_conv_input_channels(const ConvShape& shape, const uint8_t* keep, Mask* out) {
  uint64_t total = 0;
  Status s = conv_elements(shape, keep, &total);
  if (!s.ok()) return s;
  Mask m(total);
  for (uint64_t o = 0; o < shape.out_channels; ++o)
    for (uint64_t i = 0; i < shape.in_channels; ++i)
      if (keep[i]) m.set_range((o * shape.in_channels + i) * shape.kernel_elements, shape.kernel_elements, true);
  *out = std::move(m);
  return ok_status();
}

Status Mask::merge_or(const Mask& a, const Mask& b, Mask* out) {
  if (a.count_ != b.count_)
    return error(Code::kInvalidArgument, "cannot merge masks of " + std::to_string(a.count_) + " and " +
                                             std::to_string(b.count_) + " elements");
  Mask m(a.count_);
  for (size_t w = 0; w < m.words_.size(); ++w) m.words_[w] = a.words_[w] | b.words_[w];
  m.recount();
  *out = std::move(m);
  return ok_status();
}

bool Mask::any_kept(uint64_t first, uint64_t last) const {
  last = std::min(last, count_);
  while (first < last) {
    const uint64_t w = first >> 6, bit = first & 63, n = std::min<uint64_t>(64 - bit, last - first);
    if ((words_[w] >> bit) & low_bits(unsigned(n))) return true;
    first += n;
  }
  return false;
}

uint64_t Mask::hash() const {
  // A fixed-constant multiply-xorshift over (count, words): the same on every host, and every bit
  // of every word reaches the result.
  auto mix = [](uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  };
  uint64_t h = mix(count_ ^ 0x5349455645ULL);
  for (uint64_t w : words_) h = mix(h ^ w) + 0x9e3779b97f4a7c15ULL;
  return h;
}

std::vector<Range> Mask::runs() const {
  std::vector<Range> out;
  uint64_t i = 0;
  while (i < count_) {
    // Skip pruned elements a word at a time, then measure the kept run the same way.
    uint64_t w = i >> 6, word = words_[w] & ~low_bits(unsigned(i & 63));
    while (!word && ++w < words_.size()) word = words_[w];
    if (!word) break;
    const uint64_t start = w * 64 + uint64_t(__builtin_ctzll(word));
    uint64_t inverted = ~words_[w] & ~low_bits(unsigned(start & 63));
    while (!inverted && ++w < words_.size()) inverted = ~words_[w];
    const uint64_t end = inverted ? std::min(count_, w * 64 + uint64_t(__builtin_ctzll(inverted))) : count_;
    out.push_back({start, end - start});
    i = end;
  }
  return out;
}

MaskLayout Mask::layout() const {
  MaskLayout layout;
  std::vector<Range> r = runs();
  // A range costs two 64-bit values, an index one: pick the smaller description.
  if (2 * r.size() <= kept_) {
    layout.kind = MaskLayout::Kind::kRanges;
    layout.ranges = std::move(r);
    return layout;
  }
  layout.kind = MaskLayout::Kind::kIndices;
  layout.indices.reserve(kept_);
  for (const Range& run : r)
    for (uint64_t k = 0; k < run.length; ++k) layout.indices.push_back(run.start + k);
  return layout;
}

std::vector<uint8_t> Mask::to_bitmap() const {
  std::vector<uint8_t> bytes((count_ + 7) / 8);
  if (!bytes.empty()) std::memcpy(bytes.data(), words_.data(), bytes.size());
  return bytes;
}

void Mask::set_range(uint64_t first, uint64_t n, bool kept) {
  const uint64_t last = std::min(count_, first + n);
  while (first < last) {
    const uint64_t w = first >> 6, bit = first & 63, take = std::min<uint64_t>(64 - bit, last - first);
    const uint64_t field = low_bits(unsigned(take)) << bit;
    const uint64_t before = uint64_t(__builtin_popcountll(words_[w] & field));
    words_[w] = kept ? (words_[w] | field) : (words_[w] & ~field);
    kept_ = kept_ - before + (kept ? take : 0);
    first += take;
  }
}

void Mask::copy_bits(uint64_t first, const Mask& src, uint64_t src_first, uint64_t n) {
  n = std::min({n, count_ - std::min(first, count_), src.count_ - std::min(src_first, src.count_)});
  while (n) {
    // Read up to 64 source bits spanning at most two words, write them into one destination word.
    const uint64_t take = std::min<uint64_t>({n, 64 - (first & 63)});
    const uint64_t sw = src_first >> 6, sb = src_first & 63;
    uint64_t bits = src.words_[sw] >> sb;
    if (sb && sw + 1 < src.words_.size()) bits |= src.words_[sw + 1] << (64 - sb);
    bits &= low_bits(unsigned(take));
    const uint64_t w = first >> 6, field = low_bits(unsigned(take)) << (first & 63);
    kept_ -= uint64_t(__builtin_popcountll(words_[w] & field));
    words_[w] = (words_[w] & ~field) | (bits << (first & 63));
    kept_ += uint64_t(__builtin_popcountll(bits));
    first += take;
    src_first += take;
    n -= take;
  }
}

void Mask::recount() {
  kept_ = 0;
  for (uint64_t w : words_) kept_ += uint64_t(__builtin_popcountll(w));
}

}  // namespace sieve::compress
