// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "net/socket.h"

namespace sieve::net::ib {

namespace {

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::string bytes_text(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

// ---------------------------------------------------------------- page buffers

PageBuffer::~PageBuffer() {
  if (data_) munmap(data_, size_);
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Status PageBuffer::allocate(size_t bytes, PageBuffer* out) {
  const size_t size = (std::max<size_t>(bytes, 1) + page_size() - 1) / page_size() * page_size();
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED)
    return error(Code::kSystemError, "mmap of " + bytes_text(size) + " failed: " + errno_text(errno));
  *out = PageBuffer();
  out->data_ = static_cast<uint8_t*>(data);
  out->size_ = size;
  return ok_status();
}

// ---------------------------------------------------------------- registrations

RegionTable::~RegionTable() {
  // Every IbRegion holds the table, so nothing is pinned any more here; what is, is not leaked.
  for (const Pinned& p : pinned_) device_->verbs().dereg_mr(p.mr);
}

Status RegionTable::acquire(const MemoryDescriptor& memory, unsigned access, ibv_mr** out) {
  *out = nullptr;
  const VerbsLibrary& v = device_->verbs();
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.data);
  const bool dmabuf = memory.is_dmabuf();
  const uint64_t begin = dmabuf ? base : base & ~(page_size() - 1);
  const uint64_t end = dmabuf ? base + memory.size : (base + memory.size + page_size() - 1) & ~(page_size() - 1);
  const auto reuse = [&]() -> ibv_mr* {  // with mutex_ held
    for (Pinned& p : pinned_) {
      if (p.dmabuf != dmabuf || p.access != access || begin < p.begin || end > p.end) continue;
      ++p.references;
      return p.mr;
    }
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    *out = reuse();
    if (*out) return ok_status();
  }
  // Pinning takes long for large buffers: not under the lock other comms' registrations wait on.
  ibv_mr* mr = nullptr;
  if (dmabuf) {
    if (!v.reg_dmabuf_mr)
      return error(Code::kInternalError, "dma-buf registration needs ibv_reg_dmabuf_mr, which " + v.path +
                                             " does not have (rdma-core 34 or newer)");
    // The address NCCL passes is the buffer's device address: it becomes the region's iova, so
    // isend/irecv find it by that address and the peer writes to it.
    mr = v.reg_dmabuf_mr(device_->pd(), memory.dmabuf_offset, memory.size, base, memory.dmabuf_fd,
                         static_cast<int>(access));
    if (!mr)
      return error(Code::kSystemError, "ibv_reg_dmabuf_mr of " + bytes_text(memory.size) + " (fd " +
                                           std::to_string(memory.dmabuf_fd) + ") on " + device_->name() +
                                           " failed: " + errno_text(errno));
  } else {
    mr = v.reg_mr_iova2(device_->pd(), reinterpret_cast<void*>(begin), end - begin, begin, access);
    if (!mr)
      return error(Code::kSystemError, "ibv_reg_mr of " + bytes_text(memory.size) +
                                           (memory.cuda ? " of GPU memory (nvidia-peermem)" : "") + " on " +
                                           device_->name() + " failed: " + errno_text(errno));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    *out = reuse();  // another comm registered it meanwhile: keep one
    if (!*out) {
      pinned_.push_back({begin, end, dmabuf, access, mr, 1});
      *out = mr;
      return ok_status();
    }
  }
  v.dereg_mr(mr);
  return ok_status();
}

void RegionTable::release(ibv_mr* mr) {
  if (!mr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < pinned_.size(); ++i) {
    if (pinned_[i].mr != mr) continue;
    if (--pinned_[i].references == 0) {
      device_->verbs().dereg_mr(mr);
      pinned_.erase(pinned_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

size_t RegionTable::pinned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_.size();
}

void RegionList::add(IbRegion* r) {
  std::lock_guard<std::mutex> lock(mutex_);
  regions_.push_back(r);
}

void RegionList::remove(IbRegion* r) {
  std::lock_guard<std::mutex> lock(mutex_);
  regions_.erase(std::remove(regions_.begin(), regions_.end(), r), regions_.end());
}

bool RegionList::find(uint64_t begin, size_t size, uint32_t* lkey, uint32_t* rkey) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const IbRegion* r : regions_) {
    if (!r->covers(begin, size)) continue;
    if (lkey) *lkey = r->lkey();
    if (rkey) *rkey = r->rkey();
    return true;
  }
  return false;
}

IbRegion::IbRegion(std::shared_ptr<RegionTable> table, std::shared_ptr<RegionList> comm_list, ibv_mr* mr, uint64_t base,
                   size_t length, bool gpu)
    : table_(std::move(table)), comm_list_(std::move(comm_list)), mr_(mr), base_(base), length_(length), gpu_(gpu) {
  table_->regions().add(this);
  if (comm_list_) comm_list_->add(this);
}

IbRegion::~IbRegion() {
  if (comm_list_) comm_list_->remove(this);
  table_->regions().remove(this);
  table_->release(mr_);
}

bool peer_memory_loaded(const std::string& sysfs_root, std::string* which) {
  // nv_peer_mem (Mellanox's, both flavours) registers with the kernel's peer-memory core; the
  // in-driver nvidia-peermem (R470 and later) is a module of its own.
  static const char* const kFiles[] = {"/kernel/mm/memory_peers/nv_mem/version",
                                       "/kernel/mm/memory_peers/nv_mem_nc/version", "/module/nvidia_peermem/version"};
  for (const char* file : kFiles) {
    const std::string path = sysfs_root + file;
    if (::access(path.c_str(), F_OK) == 0) {
      if (which) *which = path;
      return true;
    }
  }
  return false;
}

Status register_region(const std::shared_ptr<RegionTable>& table, const std::shared_ptr<RegionList>& comm_list,
                       const MemoryDescriptor& memory, unsigned access, std::unique_ptr<MemoryRegion>* out) {
  out->reset();
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.data);
  if (memory.size == 0) {
    *out = std::make_unique<IbRegion>(table, comm_list, nullptr, base, 0, memory.is_gpu());
    return ok_status();
  }
  if (!memory.data)
    return error(Code::kInvalidArgument, "register_memory of " + bytes_text(memory.size) + " at a null address");
  ibv_mr* mr = nullptr;
  Status st = table->acquire(memory, access, &mr);
  if (!st.ok()) return st;
  *out = std::make_unique<IbRegion>(table, comm_list, mr, base, memory.size, memory.is_gpu());
  return ok_status();
}

}  // namespace sieve::net::ib
