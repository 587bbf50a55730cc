// Masks published for buffers, keyed by (base address, byte length). Entries never overlap:
// publishing a range replaces every entry it overlaps, so a trainer republishing a tensor's mask
// simply replaces it. A lookup for any address range composes the masks covering it; parts no mask
// covers count as dense (kept), which is always exact. Masks are immutable and shared, so a lookup
// racing with a publish sees either the old or the new mask, never half of one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "compress/mask.h"
#include "compress/status.h"

namespace sieve::compress {

struct MaskEntry {
  uintptr_t base = 0;
  size_t element_size = 0;
  uint64_t id = 0;
  std::shared_ptr<const Mask> mask;
  uint64_t bytes() const { return mask->count() * element_size; }
};

struct MaskLookup {
  // Null when no published mask touches the range (dense).
  std::shared_ptr<const Mask> mask;
  // How many published masks contributed.
  size_t entries = 0;
};

class MaskRegistry {
 public:
  // Stores `mask` for the buffer at `base` whose elements are `element_size` bytes; returns the
  // entry's id (never 0) in *id. Refuses null base, zero size, an empty mask, or a range that wraps.
  Status publish(const void* base, size_t element_size, std::shared_ptr<const Mask> mask, uint64_t* id);
  // Removes the entry that starts at `base`.
  Status retract(const void* base);
  // The entry that starts at `base`, if any.
  bool find(const void* base, MaskEntry* out) const;
  // Mask over the elements of [addr, addr + count * element_size). An element is kept unless every
  // byte of it lies inside published elements that are all pruned.
  MaskLookup lookup(const void* addr, uint64_t count, size_t element_size) const;
  size_t size() const;
  void clear();
  // Bumped by every publish, retract and clear: a cached view of the registry is current while the
  // generation it was built at still equals this.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, MaskEntry> entries_;  // by base; ranges disjoint
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace sieve::compress
