// Masks published for buffers: the staging area behind sieve_mask_publish() and sieve_commit().
//
// A publish stores a mask for the buffer [base, base + count * size of dtype); one that overlaps
// earlier entries replaces them, and a retract removes one. Neither changes what the collective proxy
// does by itself: the proxy uses masks only after a commit, when every rank has agreed on the
// committed table (plugin/proxy/). What a publish or retract does change at once is that the entries
// it replaces or removes are *retired*: the proxy stops using a retired entry at its next call. Both
// are explicit calls a trainer makes at the same point of its program on every rank, so every rank
// retires the same entries between the same two collectives.
//
// Entries are ordered by publish id (a process-wide sequence): the committed table lists them in that
// order, which is the same on every rank that publishes the same tensors in the same order, whatever
// addresses its allocator gave them. Masks are immutable and shared, so readers never see half of one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "compress/dtype.h"
#include "compress/mask.h"
#include "compress/status.h"

namespace sieve::compress {

class PublishedMask {
 public:
  PublishedMask(uintptr_t base, DType dtype, uint64_t id, std::shared_ptr<const Mask> mask)
      : base_(base), dtype_(dtype), id_(id), mask_(std::move(mask)) {}
  uintptr_t base() const { return base_; }
  DType dtype() const { return dtype_; }
  uint64_t id() const { return id_; }
  const std::shared_ptr<const Mask>& mask() const { return mask_; }
  uint64_t count() const { return mask_->count(); }
  uint64_t bytes() const { return mask_->count() * dtype_size(dtype_); }
  // Set once, by the publish that replaced this entry or the retract that removed it.
  bool retired() const { return retired_.load(std::memory_order_acquire); }

 private:
  friend class MaskRegistry;
  const uintptr_t base_;
  const DType dtype_;
  const uint64_t id_;
  const std::shared_ptr<const Mask> mask_;
  std::atomic<bool> retired_{false};
};

// What sieve_commit() hands to the collective proxy: the live entries at the time of the commit, in
// publish order, and the caller's commit flags (SIEVE_COMMIT_*).
struct CommittedTable {
  uint64_t epoch = 0;  // 1 for the first commit of the process, then 2, 3, ...
  uint32_t flags = 0;
  std::vector<std::shared_ptr<const PublishedMask>> entries;
};

class MaskRegistry {
 public:
  // Stores `mask` for the buffer at `base` holding mask->count() elements of `dtype`; *id (optional)
  // receives its id (never 0, never reused). Refuses a null base, an empty mask, or a buffer whose
  // end does not fit in the address space.
  Status publish(const void* base, DType dtype, std::shared_ptr<const Mask> mask, uint64_t* id);
  // Removes the entry that starts at `base` ...
  Status retract(const void* base);
  // ... or the entry with this id (a finalizer that must not remove a newer mask at the same address).
  Status retract_id(uint64_t id);
  // The live entry that starts at `base`, or null.
  std::shared_ptr<const PublishedMask> find(const void* base) const;
  size_t size() const;
  void clear();

  // Makes the live entries the committed table; returns its epoch.
  uint64_t commit(uint32_t flags);
  uint64_t commit_epoch() const { return commit_epoch_.load(std::memory_order_acquire); }
  std::shared_ptr<const CommittedTable> committed() const;
  // Bumped by every publish, retract, clear and commit.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  void retire(std::map<uintptr_t, std::shared_ptr<PublishedMask>>::iterator it);

  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, std::shared_ptr<PublishedMask>> entries_;  // by base; ranges disjoint
  uint64_t next_id_ = 1;
  std::shared_ptr<const CommittedTable> committed_;
  std::atomic<uint64_t> commit_epoch_{0};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace sieve::compress
