#include "compress/mask_registry.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace sieve::compress {

void MaskRegistry::retire(std::map<uintptr_t, std::shared_ptr<PublishedMask>>::iterator it) {
  it->second->retired_.store(true, std::memory_order_release);
}

Status MaskRegistry::publish(const void* base, DType dtype, std::shared_ptr<const Mask> mask, uint64_t* id) {
  if (!base) return Status::error(Code::kInvalidArgument, "buffer address is null");
  if (!mask || mask->count() == 0) return Status::error(Code::kInvalidArgument, "mask has no elements");
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  uint64_t bytes = 0;
  uintptr_t end = 0;
  if (__builtin_mul_overflow(mask->count(), uint64_t(dtype_size(dtype)), &bytes) ||
      __builtin_add_overflow(start, bytes, &end))
    return Status::error(Code::kOutOfRange, "a buffer of " + std::to_string(mask->count()) + " " +
                                                dtype_name(dtype) + " elements at this address wraps around the address space");

  std::unique_lock lock(mutex_);
  // Retire and drop every entry overlapping [start, end): the one starting before `start` (if it
  // reaches in) and those starting inside.
  auto it = entries_.lower_bound(start);
  if (it != entries_.begin()) {
    auto previous = std::prev(it);
    if (previous->first + previous->second->bytes() > start) it = previous;
  }
  while (it != entries_.end() && it->first < end) {
    retire(it);
    it = entries_.erase(it);
  }
  const uint64_t new_id = next_id_++;
  entries_.emplace(start, std::make_shared<PublishedMask>(start, dtype, new_id, std::move(mask)));
  if (id) *id = new_id;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok_status();
}

Status MaskRegistry::retract(const void* base) {
  std::unique_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  if (it == entries_.end()) return Status::error(Code::kNotFound, "no mask is published at this address");
  retire(it);
  entries_.erase(it);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok_status();
}

Status MaskRegistry::retract_id(uint64_t id) {
  std::unique_lock lock(mutex_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [id](const auto& e) { return e.second->id() == id; });
  if (it == entries_.end()) return Status::error(Code::kNotFound, "no live mask has id " + std::to_string(id));
  retire(it);
  entries_.erase(it);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok_status();
}

std::shared_ptr<const PublishedMask> MaskRegistry::find(const void* base) const {
  std::shared_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  return it == entries_.end() ? nullptr : it->second;
}

size_t MaskRegistry::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

void MaskRegistry::clear() {
  std::unique_lock lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) retire(it);
  entries_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t MaskRegistry::commit(uint32_t flags) {
  std::unique_lock lock(mutex_);
  auto table = std::make_shared<CommittedTable>();
  table->flags = flags;
  for (const auto& [base, entry] : entries_) table->entries.push_back(entry);
  std::sort(table->entries.begin(), table->entries.end(),
            [](const auto& a, const auto& b) { return a->id() < b->id(); });
  table->epoch = commit_epoch_.load(std::memory_order_relaxed) + 1;
  committed_ = table;
  commit_epoch_.store(table->epoch, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return table->epoch;
}

std::shared_ptr<const CommittedTable> MaskRegistry::committed() const {
  std::shared_lock lock(mutex_);
  return committed_;
}

}  // namespace sieve::compress
