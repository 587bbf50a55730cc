// SPDX-License-Identifier: Apache-2.0
#include "compress/mask_registry.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace sieve::compress {

const char* mask_target_name(std::optional<Collective> collective) {
  if (!collective) return "buffer";
  switch (*collective) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllGather: return "all-gather";
  }
  return "?";
}

void MaskRegistry::unstage(const std::shared_ptr<const PublishedMask>& entry) {
  // Keep only entries someone still holds: the map stays as small as the tables that use it.
  for (auto u = unstaged_.begin(); u != unstaged_.end();) u = u->second.expired() ? unstaged_.erase(u) : std::next(u);
  unstaged_.emplace(entry->id(), entry);
}

void MaskRegistry::count_entries() { size_.store(entries_.size() + collectives_.size(), std::memory_order_release); }

Status MaskRegistry::publish(const void* base, DType dtype, std::shared_ptr<const Mask> mask, uint64_t* id,
                             uint64_t scope) {
  if (!base) return error(Code::kInvalidArgument, "buffer address is null");
  if (!mask || mask->count() == 0) return error(Code::kInvalidArgument, "mask has no elements");
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  uint64_t bytes = 0;
  uintptr_t end = 0;
  if (__builtin_mul_overflow(mask->count(), uint64_t(dtype_size(dtype)), &bytes) ||
      __builtin_add_overflow(start, bytes, &end))
    return error(Code::kOutOfRange, "a buffer of " + std::to_string(mask->count()) + " " + dtype_name(dtype) +
                                        " elements at this address wraps around the address space");

  std::unique_lock lock(mutex_);
  // Unstage every entry overlapping [start, end): the one starting before `start` (if it reaches
  // in) and those starting inside.
  auto it = entries_.lower_bound(start);
  if (it != entries_.begin()) {
    auto previous = std::prev(it);
    if (previous->first + previous->second->bytes() > start) it = previous;
  }
  for (auto o = it; o != entries_.end() && o->first < end; ++o)
    if (o->second->scope() != scope)
      return error(Code::kOutOfRange,
                   "the buffer overlaps a mask staged for another communicator (or for "
                   "every communicator); retract that one first");
  while (it != entries_.end() && it->first < end) {
    unstage(it->second);
    it = entries_.erase(it);
  }
  const uint64_t new_id = next_id_++;
  entries_.emplace(start,
                   std::make_shared<const PublishedMask>(start, dtype, new_id, std::move(mask), std::nullopt, scope));
  count_entries();
  if (id) *id = new_id;
  ++generation_;
  return ok_status();
}

Status MaskRegistry::publish_collective(Collective collective, DType dtype, std::shared_ptr<const Mask> mask,
                                        uint64_t* id, uint64_t scope) {
  if (collective == Collective::kAllReduce)
    return error(Code::kInvalidArgument, "a collective's mask is for reduce-scatter or all-gather");
  if (!mask || mask->count() == 0) return error(Code::kInvalidArgument, "mask has no elements");
  std::unique_lock lock(mutex_);
  const uint64_t new_id = next_id_++;
  collectives_.push_back(std::make_shared<const PublishedMask>(0, dtype, new_id, std::move(mask), collective, scope));
  count_entries();
  if (id) *id = new_id;
  ++generation_;
  return ok_status();
}

Status MaskRegistry::retract(const void* base) {
  std::unique_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  if (it == entries_.end()) return error(Code::kNotFound, "no mask is published at this address");
  unstage(it->second);
  entries_.erase(it);
  count_entries();
  ++generation_;
  return ok_status();
}

Status MaskRegistry::retract_id(uint64_t id) {
  std::unique_lock lock(mutex_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [id](const auto& e) { return e.second->id() == id; });
  if (it != entries_.end()) {
    unstage(it->second);
    entries_.erase(it);
  } else {
    auto c = std::find_if(collectives_.begin(), collectives_.end(), [id](const auto& e) { return e->id() == id; });
    if (c == collectives_.end()) return error(Code::kNotFound, "no published mask has id " + std::to_string(id));
    unstage(*c);
    collectives_.erase(c);
  }
  count_entries();
  ++generation_;
  return ok_status();
}

std::shared_ptr<const PublishedMask> MaskRegistry::find(const void* base) const {
  std::shared_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  return it == entries_.end() ? nullptr : it->second;
}

size_t MaskRegistry::size() const { return size_.load(std::memory_order_acquire); }

void MaskRegistry::clear() {
  std::unique_lock lock(mutex_);
  for (const auto& [base, entry] : entries_) unstage(entry);
  for (const auto& entry : collectives_) unstage(entry);
  entries_.clear();
  collectives_.clear();
  count_entries();
  ++generation_;
}

StagedEntries MaskRegistry::snapshot(uint64_t scope) const {
  std::shared_lock lock(mutex_);
  StagedEntries out;
  out.reserve(entries_.size() + collectives_.size());
  const auto mine = [scope](const std::shared_ptr<const PublishedMask>& e) {
    return e->scope() == 0 || e->scope() == scope;
  };
  for (const auto& [base, entry] : entries_)
    if (mine(entry)) out.push_back(entry);
  for (const auto& entry : collectives_)
    if (mine(entry)) out.push_back(entry);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->id() < b->id(); });
  return out;
}

Status MaskRegistry::released(uint64_t id, bool* out) const {
  std::unique_lock lock(mutex_);  // prunes unstaged_
  if (id == 0 || id >= next_id_)
    return error(Code::kNotFound, "no mask was ever published with id " + std::to_string(id));
  const auto staged = [id](const std::shared_ptr<const PublishedMask>& e) { return e->id() == id; };
  if (std::any_of(collectives_.begin(), collectives_.end(), staged) ||
      std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return staged(e.second); })) {
    *out = false;
    return ok_status();
  }
  auto it = unstaged_.find(id);
  if (it != unstaged_.end() && it->second.expired()) unstaged_.erase(it), it = unstaged_.end();
  *out = it == unstaged_.end();
  return ok_status();
}

uint64_t MaskRegistry::generation() const {
  std::shared_lock lock(mutex_);
  return generation_;
}

}  // namespace sieve::compress
