// DeviceBackend on a real GPU: the compress/cuda kernels, CUDA runtime memory and events, and the
// real NCCL (real_nccl.h). Allocations happen on the calling thread's current device (PyTorch's
// ProcessGroupNCCL sets it to the communicator's device around every collective).
#pragma once

#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy {

class CudaBackend : public DeviceBackend {
 public:
  int all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                 Stream stream) override;
  int group_start() override;
  int group_end() override;
  bool capturing(Stream stream) override;
  int agree(Comm comm, Stream stream, uint64_t hash, bool* all_equal) override;
  int create_plan(const compress::Mask& mask, ElemType type, bool with_check, std::unique_ptr<DevicePlan>* out) override;
  int gather(DevicePlan& plan, const void* src, Stream stream) override;
  int scatter(DevicePlan& plan, void* dst, Stream stream) override;
  int check(DevicePlan& plan, const void* src, const FlagEncoding& encoding, Stream stream) override;
  int create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) override;
  int record_nonzero(LagSlot& slot, const void* buf, uint64_t count, ElemType type, Stream stream) override;
  int record_flag(LagSlot& slot, DevicePlan& plan, Stream stream) override;
  int read_nonzero(LagSlot& slot, uint64_t count, compress::Mask* nonzero) override;
  int read_flag(LagSlot& slot, uint64_t* flag_bits, uint64_t* local_violations) override;
};

}  // namespace sieve::plugin::proxy
