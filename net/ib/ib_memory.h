// SPDX-License-Identifier: Apache-2.0
// Registered memory of the verbs transport: the regions NCCL registers (looked up by address on
// every isend/irecv), and the pages Sieve registers for itself (control buffers).
//
// Registrations belong to the device, not the comm (regIsGlobal=1, as NCCL's IB transport): NCCL
// registers the same buffer on every comm that moves it (each peer's, and ncclCommRegister's
// first registration on a loopback comm), and expects a buffer inside an earlier registration to be
// "nearly immediate". One table per device (one protection domain) keeps each memory registration
// once, reference-counted: a registration inside the pages of a live one of the same access takes
// a reference to it instead of pinning the pages again, and the last deregistration unpins. Any comm
// of the device finds any of its registrations.
//
// Registrations cover whole pages. ibv_fork_init (verbs_library.cc) makes rdma-core mark every page
// a registration touches "don't fork", so a child forked later (a PyTorch DataLoader worker) gets
// none of them: Sieve's own buffers therefore own their pages outright, and a buffer NCCL hands in
// is registered page-rounded, as NCCL's IB transport does, so the registration says what it pins.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "net/ib/device_context.h"
#include "net/status.h"
#include "net/transport.h"

namespace sieve::net::ib {

// Zeroed, page-aligned memory of whole pages (an anonymous mapping), never shared with the heap.
class PageBuffer {
 public:
  PageBuffer() = default;
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  // At least `bytes`, rounded up to whole pages.
  static Status allocate(size_t bytes, PageBuffer* out);
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class IbRegion;

// NCCL's registrations (the caller's buffers), looked up by address on every isend/irecv: one list
// per comm (those made on it: the lookup that almost always succeeds, as short as before
// registrations were the device's) and one per device (the rest).
class RegionList {
 public:
  void add(IbRegion* r);
  void remove(IbRegion* r);
  // The keys of a registration covering [begin, begin+size); false when none does.
  bool find(uint64_t begin, size_t size, uint32_t* lkey, uint32_t* rkey) const;

 private:
  mutable std::mutex mutex_;
  std::vector<IbRegion*> regions_;
};

// The registrations of one device, shared by its comms.
class RegionTable {
 public:
  explicit RegionTable(std::shared_ptr<DeviceContext> device) : device_(std::move(device)) {}
  ~RegionTable();
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // A memory registration of [begin, end) (page-rounded for host memory and CUDA pointers; the
  // buffer itself for a dma-buf) with `access`: a live one whose range holds it, of the same kind and
  // access, with one more reference, else a new one. Errors name the call, the size and the device.
  Status acquire(const MemoryDescriptor& memory, unsigned access, ibv_mr** out);
  // Drops one reference; the last deregisters.
  void release(ibv_mr* mr);

  // Every registration of the device, whichever comm it was made on.
  RegionList& regions() { return regions_; }
  const RegionList& regions() const { return regions_; }
  // Memory registrations alive (each pinned once, whatever its references).
  size_t pinned() const;
  const std::shared_ptr<DeviceContext>& device() const { return device_; }

 private:
  struct Pinned {
    uint64_t begin, end;  // what the memory registration spans
    bool dmabuf;
    unsigned access;
    ibv_mr* mr;
    int references;
  };
  const std::shared_ptr<DeviceContext> device_;  // the protection domain outlives every registration
  mutable std::mutex mutex_;                     // guards pinned_; held while registering, never while looking up
  std::vector<Pinned> pinned_;
  RegionList regions_;
};

// One registration; dropping it deregisters (NCCL's deregMr).
class IbRegion final : public MemoryRegion {
 public:
  // `base`/`length`: the caller's buffer (what covers() answers for); `mr` (a reference taken from
  // `table`, dropped here) may span more. `gpu`: GPU memory (a dma-buf or a CUDA pointer), which the
  // NIC's writes reach only in order with a flush.
  // `comm_list`: the list of the comm it was made on (null: none), which it outlives if it must.
  IbRegion(std::shared_ptr<RegionTable> table, std::shared_ptr<RegionList> comm_list, ibv_mr* mr, uint64_t base,
           size_t length, bool gpu);
  ~IbRegion() override;
  bool covers(uint64_t begin, size_t size) const { return mr_ && begin >= base_ && begin + size <= base_ + length_; }
  uint32_t lkey() const { return mr_ ? mr_->lkey : 0; }
  uint32_t rkey() const { return mr_ ? mr_->rkey : 0; }
  bool gpu() const { return gpu_; }

 private:
  const std::shared_ptr<RegionTable> table_;  // and through it the protection domain
  const std::shared_ptr<RegionList> comm_list_;
  ibv_mr* const mr_;  // null for an empty registration
  const uint64_t base_;
  const size_t length_;
  const bool gpu_;
};

// Whether a GPU peer-memory client is loaded (nvidia-peermem, or the older nv_peer_mem), so that
// ibv_reg_mr takes CUDA device pointers, as NCCL's IB transport checks it: the files the modules
// create under `sysfs_root` (/sys). `which` names the file found.
bool peer_memory_loaded(const std::string& sysfs_root, std::string* which);

// Registers `memory` with `access` in `table` (its device): host memory and CUDA pointers
// page-rounded at their own addresses (the peer-memory client pins the GPU pages behind them), a
// dma-buf at the buffer's device address; inside a live registration, a reference to it. Zero bytes
// register nothing (a zero-byte message needs no key). Errors name the call, the size and the device.
Status register_region(const std::shared_ptr<RegionTable>& table, const std::shared_ptr<RegionList>& comm_list,
                       const MemoryDescriptor& memory, unsigned access, std::unique_ptr<MemoryRegion>* out);

}  // namespace sieve::net::ib
