// SPDX-License-Identifier: Apache-2.0
// Masks published for buffers: the staging area behind sieve_mask_publish*() and sieve_mask_retract*().
//
// A publish stages a mask for the buffer [base, base + count * size of dtype); one that overlaps
// staged entries replaces them, and a retract removes one. Staging changes nothing the collective
// proxy does: a communicator uses masks only from its commits (plugin/proxy/), each of which takes a
// snapshot of what is staged and activates it only when every rank of that communicator agrees. So
// a publish or retract on one rank can never make that rank's collectives differ from its peers'.
//
// A publish may name a scope (the collective proxy: the communicator it is for); scope 0, an
// unscoped publish, is for every communicator. A commit takes the unscoped entries and those of its
// own scope only, so a publish for another communicator, from any thread at any moment, never
// changes what a commit votes on. Entries of different scopes never overlap: such a publish is
// refused (it would replace, and so change, another scope's staged entry).
//
// Entries are ordered by publish id (a process-wide sequence): a snapshot lists them in that order,
// which is the same on every rank that publishes the same tensors in the same order, whatever
// addresses its allocator gave them. Entries are immutable and shared, so readers never see half of
// one; an entry stays alive while any communicator's agreed table holds it, and released() tells a
// binding when a retracted buffer may be freed (no agreed table uses it any more).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "compress/collective.h"
#include "compress/dtype.h"
#include "compress/mask.h"
#include "compress/status.h"

namespace sieve::compress {

// What a mask describes: one buffer (no collective: whichever collective reduces it), or every
// reduce-scatter or all-gather of a shape, whatever buffers it is given (FSDP allocates them afresh
// each step). For logs: "buffer", "reduce-scatter" or "all-gather".
const char* mask_target_name(std::optional<Collective> collective);

class PublishedMask {
 public:
  PublishedMask(uintptr_t base, DType dtype, uint64_t id, std::shared_ptr<const Mask> mask,
                std::optional<Collective> collective = std::nullopt, uint64_t scope = 0)
      : base_(base), dtype_(dtype), id_(id), mask_(std::move(mask)), collective_(collective), scope_(scope) {}
  uint64_t scope() const { return scope_; }                             // 0: every communicator
  std::optional<Collective> collective() const { return collective_; }  // none: a buffer's mask
  uintptr_t base() const { return base_; }                              // 0 for a collective's mask
  DType dtype() const { return dtype_; }
  uint64_t id() const { return id_; }
  const std::shared_ptr<const Mask>& mask() const { return mask_; }
  uint64_t count() const { return mask_->count(); }
  uint64_t bytes() const { return mask_->count() * dtype_size(dtype_); }

 private:
  const uintptr_t base_;
  const DType dtype_;
  const uint64_t id_;
  const std::shared_ptr<const Mask> mask_;
  const std::optional<Collective> collective_;
  const uint64_t scope_;
};

using StagedEntries = std::vector<std::shared_ptr<const PublishedMask>>;

class MaskRegistry {
 public:
  // Stages `mask` for the buffer at `base` holding mask->count() elements of `dtype`; *id (optional)
  // receives its id (never 0, never reused). Refuses a null base, an empty mask, or a buffer whose
  // end does not fit in the address space, or one overlapping an entry of another scope.
  Status publish(const void* base, DType dtype, std::shared_ptr<const Mask> mask, uint64_t* id, uint64_t scope = 0);
  // Stages `mask` for every `collective` (reduce-scatter or all-gather) moving mask->count()
  // elements of `dtype` across all ranks, whatever its buffers: the collective's whole buffer, rank
  // 0's part first. Several may share a shape: a call compacts with them only when they are all one
  // mask (plugin/proxy, Proxy::shape_mask). Replaces nothing.
  Status publish_collective(Collective collective, DType dtype, std::shared_ptr<const Mask> mask, uint64_t* id,
                            uint64_t scope = 0);
  // Unstages the entry that starts at `base` ...
  Status retract(const void* base);
  // ... or the entry with this id (a caller that must not remove a newer mask at the same address).
  Status retract_id(uint64_t id);
  // The staged entry that starts at `base`, or null.
  std::shared_ptr<const PublishedMask> find(const void* base) const;
  size_t size() const;
  void clear();

  // What a commit of `scope` takes: the staged unscoped entries and those of `scope`, in publish order.
  StagedEntries snapshot(uint64_t scope = 0) const;
  // True when mask `id` is neither staged nor held by any agreed table (what held it has been
  // replaced by a later commit, or its communicator is gone): its buffer may be freed. false while
  // it is; kNotFound for an id this registry never gave out.
  Status released(uint64_t id, bool* out) const;
  // Bumped by every publish, retract and clear.
  uint64_t generation() const;

 private:
  using Entries = std::map<uintptr_t, std::shared_ptr<const PublishedMask>>;
  void unstage(const std::shared_ptr<const PublishedMask>& entry);
  void count_entries();

  mutable std::shared_mutex mutex_;
  Entries entries_;                                                // by base; ranges disjoint
  std::vector<std::shared_ptr<const PublishedMask>> collectives_;  // collectives' masks, in publish order
  // Unstaged entries an agreed table may still hold, by id; pruned as they expire.
  mutable std::map<uint64_t, std::weak_ptr<const PublishedMask>> unstaged_;
  uint64_t next_id_ = 1;
  uint64_t generation_ = 0;
  std::atomic<size_t> size_{0};  // entries_.size(), read without the lock (the proxy asks per call)
};

}  // namespace sieve::compress
