// The interface's defaults: what a transport without registered memory (TCP) does.
#include "net/transport.h"

namespace sieve::net {

namespace {

Status host_only_registration(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) {
  out->reset();
  if (memory.is_dmabuf())
    return error(Code::InternalError, "dma-buf registration is not supported by the TCP transport (host memory only)");
  // Host memory is read and written by the kernel's socket calls: nothing to pin, nothing to keep.
  *out = std::make_unique<MemoryRegion>();
  return Status::ok();
}

}  // namespace

Status SendComm::register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) {
  return host_only_registration(memory, out);
}

Status RecvComm::register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) {
  return host_only_registration(memory, out);
}

Status RecvComm::flush(void*, size_t, MemoryRegion*, Request** request) {
  *request = nullptr;
  return Status::ok();
}

std::string Transport::auto_chose_verbs(size_t active_ports) {
  return "SIEVE_TRANSPORT=auto: libibverbs loaded and " + std::to_string(active_ports) + " active RDMA port(s) selected";
}

}  // namespace sieve::net
