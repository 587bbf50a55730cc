// SPDX-License-Identifier: Apache-2.0
// DeviceBackend on a real GPU: the compress/cuda kernels, CUDA runtime memory, events and streams,
// and the real NCCL (real_nccl.h). Allocations happen on the calling thread's current device, which
// must be the communicator's (PyTorch's ProcessGroupNCCL sets it around every collective; the
// kernels are launched on the caller's stream, which NCCL requires to be on that device too).
#pragma once

#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy {

class CudaBackend : public DeviceBackend {
 public:
  int all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm,
                 Stream stream) override;
  int reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                     Stream stream) override;
  int all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream stream) override;
  int group_start() override;
  int group_end() override;
  int group_simulate_end(void* sim_info) override;
  int comm_shape(Comm comm, int* nranks, int* rank) override;
  int wait_enqueued(Comm comm, CommLiveness& live) override;
  int abort_comm(Comm comm) override;
  int create_counter(std::unique_ptr<ViolationCounter>* out) override;
  int count_pruned(const DeviceLayout& layout, size_t element_size, const void* src, ViolationCounter& counter,
                   bool copy, Stream stream) override;
  bool abort_keeps_handle() const override;
  int comm_async_error(Comm comm, int* error) override;
  int capture_status(Stream stream, bool* capturing) override;
  // A CUDA user object the captured graph retains (cudaGraphRetainUserObject).
  bool keep_for_graph(Stream stream, std::shared_ptr<void> keep) override;
  int create_exchange(uint64_t bytes, std::unique_ptr<Exchange>* out) override;
  int exchange_in(Exchange& ex, void* device, uint64_t count, int width, Comm comm, Stream stream) override;
  int exchange_out(Exchange& ex, const void* device, uint64_t count, int width, Stream stream) override;
  int wait_exchange(Exchange& ex, Comm comm, CommLiveness& live) override;
  int create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                    std::unique_ptr<DeviceLayout>* out) override;
  int create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) override;
  int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact, Stream stream) override;
  int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst, Stream stream) override;
  int check(const DeviceLayout& layout, size_t element_size, const void* src, void* flag, const FlagEncoding& encoding,
            DeviceBuffer& counter, Stream stream) override;
  int create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) override;
  int record_nonzero(LagSlot& slot, const void* buf, uint64_t count, DType type, Stream stream) override;
  int record_flag(LagSlot& slot, const void* flag, size_t element_size, DeviceBuffer& counter, Stream stream) override;
  int download(const void* device, void* host, uint64_t bytes, Stream stream, Comm comm, CommLiveness& live) override;
  int read_nonzero(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t count, compress::Mask* nonzero) override;
  int read_flag(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t* flag_bits, uint64_t* local_violations) override;
};

// Why CUDA cannot run here ("" when it can): no device, or a driver older than the CUDA runtime
// this library was built with, named with both versions.
std::string cuda_problem();

}  // namespace sieve::plugin::proxy
