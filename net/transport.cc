// SPDX-License-Identifier: Apache-2.0
// The interface's defaults: what a transport without registered memory (TCP) does.
#include "net/transport.h"

namespace sieve::net {

namespace {

Status host_only_registration(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) {
  out->reset();
  if (memory.is_dmabuf())
    return error(Code::kInternalError, "dma-buf registration is not supported by the TCP transport (host memory only)");
  if (memory.cuda)
    return error(Code::kInternalError, "GPU memory cannot be registered with the TCP transport (host memory only)");
  // Host memory is read and written by the kernel's socket calls: nothing to pin, nothing to keep.
  *out = std::make_unique<MemoryRegion>();
  return ok_status();
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
  return ok_status();
}

Transport::Choice Transport::choose(Asked asked, bool verbs_usable, size_t active_ports,
                                    const std::string& verbs_problem) {
  if (asked != Asked::kAuto)
    return {asked == Asked::kIb, asked == Asked::kIb ? "SIEVE_TRANSPORT=ib" : "SIEVE_TRANSPORT=tcp"};
  if (verbs_usable)
    return {true, "SIEVE_TRANSPORT=auto: libibverbs loaded and " + std::to_string(active_ports) +
                      " active RDMA port(s) selected"};
  return {false, "SIEVE_TRANSPORT=auto: " + verbs_problem};
}

}  // namespace sieve::net
