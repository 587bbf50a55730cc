#include "compress/mask_registry.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace sieve::compress {

Status MaskRegistry::publish(const void* base, size_t element_size, std::shared_ptr<const Mask> mask,
                             uint64_t* id) {
  if (!base) return Status::error(Code::kInvalidArgument, "buffer address is null");
  if (element_size == 0) return Status::error(Code::kInvalidArgument, "element size is zero");
  if (!mask || mask->count() == 0) return Status::error(Code::kInvalidArgument, "mask has no elements");
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(mask->count(), uint64_t(element_size), &bytes) || start + bytes < start)
    return Status::error(Code::kOutOfRange, "buffer of " + std::to_string(mask->count()) +
                                                " elements wraps around the address space");
  const uintptr_t end = start + bytes;

  std::unique_lock lock(mutex_);
  // Drop every entry overlapping [start, end): the one starting before `start` (if it reaches in)
  // and those starting inside.
  auto it = entries_.lower_bound(start);
  if (it != entries_.begin()) {
    auto previous = std::prev(it);
    if (previous->first + previous->second.bytes() > start) it = previous;
  }
  while (it != entries_.end() && it->first < end) it = entries_.erase(it);

  MaskEntry entry;
  entry.base = start;
  entry.element_size = element_size;
  entry.id = next_id_++;
  entry.mask = std::move(mask);
  if (id) *id = entry.id;
  entries_.emplace(start, std::move(entry));
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok_status();
}

Status MaskRegistry::retract(const void* base) {
  std::unique_lock lock(mutex_);
  if (entries_.erase(reinterpret_cast<uintptr_t>(base)) == 0)
    return Status::error(Code::kNotFound, "no mask is published for this buffer address");
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok_status();
}

bool MaskRegistry::find(const void* base, MaskEntry* out) const {
  std::shared_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  if (it == entries_.end()) return false;
  if (out) *out = it->second;
  return true;
}

MaskLookup MaskRegistry::lookup(const void* addr, uint64_t count, size_t element_size) const {
  MaskLookup result;
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  uint64_t bytes = 0;
  if (!addr || count == 0 || element_size == 0 ||
      __builtin_mul_overflow(count, uint64_t(element_size), &bytes) || start + bytes < start)
    return result;
  const uintptr_t end = start + bytes;

  std::shared_lock lock(mutex_);
  auto it = entries_.lower_bound(start);
  if (it != entries_.begin() && std::prev(it)->first + std::prev(it)->second.bytes() > start) --it;
  std::vector<const MaskEntry*> covering;
  for (; it != entries_.end() && it->first < end; ++it) covering.push_back(&it->second);
  if (covering.empty()) return result;

  result.entries = covering.size();
  const MaskEntry& first = *covering.front();
  if (covering.size() == 1 && first.base == start && first.element_size == element_size &&
      first.mask->count() == count) {
    result.mask = first.mask;  // the common case: the buffer is exactly one published tensor
    return result;
  }

  auto composed = std::make_shared<Mask>(count, true);
  for (const MaskEntry* e : covering) {
    const uintptr_t lo = std::max<uintptr_t>(e->base, start), hi = std::min<uintptr_t>(e->base + e->bytes(), end);
    // Only lookup elements lying wholly inside the entry can be pruned; partial ones stay kept.
    const uint64_t j0 = (lo - start + element_size - 1) / element_size, j1 = (hi - start) / element_size;
    if (j0 >= j1) continue;
    const uint64_t offset = start + j0 * element_size - e->base;  // bytes into the entry
    if (e->element_size == element_size && offset % element_size == 0) {
      composed->copy_bits(j0, *e->mask, offset / element_size, j1 - j0);
      continue;
    }
    for (uint64_t j = j0; j < j1; ++j) {
      const uint64_t b0 = start + j * element_size - e->base, b1 = b0 + element_size;
      const uint64_t p0 = b0 / e->element_size, p1 = (b1 + e->element_size - 1) / e->element_size;
      if (!e->mask->any_kept(p0, p1)) composed->set_range(j, 1, false);
    }
  }
  result.mask = std::move(composed);
  return result;
}

size_t MaskRegistry::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

void MaskRegistry::clear() {
  std::unique_lock lock(mutex_);
  entries_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace sieve::compress
