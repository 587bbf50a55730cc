// Registered memory of the verbs transport: the regions NCCL registers on a comm (looked up by
// address on every isend/irecv), and the pages Sieve registers for itself (control buffers).
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

// The registrations of one comm, looked up by address on every isend/irecv.
class RegionTable {
 public:
  void add(IbRegion* r);
  void remove(IbRegion* r);
  // The keys of a registration covering [begin, begin+size); false when none does.
  bool find(uint64_t begin, size_t size, uint32_t* lkey, uint32_t* rkey) const;

 private:
  mutable std::mutex mutex_;
  std::vector<IbRegion*> regions_;
};

// One registration; dropping it deregisters (NCCL's deregMr).
class IbRegion final : public MemoryRegion {
 public:
  // `base`/`length`: the caller's buffer (what covers() answers for); `mr` may span more (whole pages).
  // `gpu`: GPU memory (a dma-buf or a CUDA pointer), which the NIC's writes reach only in order
  // with a flush.
  IbRegion(std::shared_ptr<RegionTable> table, std::shared_ptr<DeviceContext> device, ibv_mr* mr, uint64_t base,
           size_t length, bool gpu);
  ~IbRegion() override;
  bool covers(uint64_t begin, size_t size) const { return mr_ && begin >= base_ && begin + size <= base_ + length_; }
  uint32_t lkey() const { return mr_ ? mr_->lkey : 0; }
  uint32_t rkey() const { return mr_ ? mr_->rkey : 0; }
  bool gpu() const { return gpu_; }

 private:
  const std::shared_ptr<RegionTable> table_;
  const std::shared_ptr<DeviceContext> device_;  // the protection domain outlives the registration
  ibv_mr* const mr_;                             // null for an empty registration
  const uint64_t base_;
  const size_t length_;
  const bool gpu_;
};

// Whether a GPU peer-memory client is loaded (nvidia-peermem, or the older nv_peer_mem), so that
// ibv_reg_mr takes CUDA device pointers, as NCCL's IB transport checks it: the files the modules
// create under `sysfs_root` (/sys). `which` names the file found.
bool peer_memory_loaded(const std::string& sysfs_root, std::string* which);

// Registers `memory` on `device` with `access` and adds it to `table`: host memory and CUDA
// pointers page-rounded at their own addresses (the peer-memory client pins the GPU pages behind
// them), a dma-buf at the buffer's device address. Zero bytes register nothing (a
// zero-byte message needs no key). Errors name the call, the size and the device.
Status register_region(const std::shared_ptr<DeviceContext>& device, const std::shared_ptr<RegionTable>& table,
                       const MemoryDescriptor& memory, unsigned access, std::unique_ptr<MemoryRegion>* out);

}  // namespace sieve::net::ib
