// What the collective proxy needs from a GPU and from the real NCCL, behind one interface: the CUDA
// backend (cuda_backend.cc) implements it with the compress/cuda kernels and the NCCL symbols found
// by dlsym(RTLD_NEXT); tests implement it on host memory. Every method returns 0 on success or an
// NCCL-style result code, which the proxy hands back to the caller unchanged.
// Ordering contract: everything taking a Stream is enqueued on it (no host synchronisation), except
// agree() and the read_*() calls, which wait, and which the proxy calls only off the hot path
// (agree: once per buffer and mask) or at a fixed lag (read_*: the record of a call L calls ago).
#pragma once

#include <cstdint>
#include <memory>

#include "compress/mask.h"
#include "plugin/proxy/proxy_types.h"

namespace sieve::plugin::proxy {

// NCCL's result codes the proxy itself produces.
enum ResultCode : int {
  kResultSuccess = 0,
  kResultCudaError = 1,       // ncclUnhandledCudaError
  kResultSystemError = 2,     // ncclSystemError (e.g. the real NCCL symbol is missing)
  kResultInternalError = 3,   // ncclInternalError
  kResultInvalidArgument = 4, // ncclInvalidArgument
  kResultInProgress = 7,      // ncclInProgress: a non-blocking communicator accepted the call
};

// True for codes after which the rest of a collective's work may still be enqueued.
inline bool enqueued(int rc) { return rc == kResultSuccess || rc == kResultInProgress; }

// A mask's device-resident form plus the compact buffer its collectives run on: nnz elements, and
// one more for the violation flag when the plan was built with a check (learned masks).
class DevicePlan {
 public:
  virtual ~DevicePlan() = default;
  virtual uint64_t count() const = 0;
  virtual uint64_t nnz() const = 0;
  virtual bool with_check() const = 0;
  virtual void* compact() = 0;
};

// A host-visible record that one call fills asynchronously (a nonzero bitmap, or a reduced flag and
// a violation count) and that the host reads a fixed number of calls later.
class LagSlot {
 public:
  virtual ~LagSlot() = default;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // The real collectives: never the interposed symbols.
  virtual int all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                         Stream stream) = 0;
  virtual int group_start() = 0;
  virtual int group_end() = 0;
  // True while `stream` is being captured into a CUDA graph: nothing may allocate or wait then.
  virtual bool capturing(Stream stream) = 0;
  // Exchanges `hash` among comm's ranks with a tiny all-reduce on `stream` and waits for it:
  // *all_equal is the same on every rank, true iff every rank passed the same hash.
  virtual int agree(Comm comm, Stream stream, uint64_t hash, bool* all_equal) = 0;

  // Uploads `mask` (kept elements of a buffer of `type`) and allocates its compact buffer.
  virtual int create_plan(const compress::Mask& mask, ElemType type, bool with_check,
                          std::unique_ptr<DevicePlan>* out) = 0;
  // plan.compact()[0, nnz) = kept elements of src.
  virtual int gather(DevicePlan& plan, const void* src, Stream stream) = 0;
  // dst = kept elements from plan.compact(), exact zero everywhere else. dst may be gather's src.
  virtual int scatter(DevicePlan& plan, void* dst, Stream stream) = 0;
  // plan.compact()[nnz] = encoding.bad_bits if src is nonzero anywhere the plan prunes, else
  // ok_bits; counts those elements for record_flag. Needs a plan built with_check.
  virtual int check(DevicePlan& plan, const void* src, const FlagEncoding& encoding, Stream stream) = 0;

  virtual int create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) = 0;
  // Records which of buf's count elements are nonzero.
  virtual int record_nonzero(LagSlot& slot, const void* buf, uint64_t count, ElemType type, Stream stream) = 0;
  // Records the (reduced) flag element plan.compact()[nnz] and check()'s local violation count.
  virtual int record_flag(LagSlot& slot, DevicePlan& plan, Stream stream) = 0;
  // Wait for the slot's record, then read it.
  virtual int read_nonzero(LagSlot& slot, uint64_t count, compress::Mask* nonzero) = 0;
  virtual int read_flag(LagSlot& slot, uint64_t* flag_bits, uint64_t* local_violations) = 0;
};

}  // namespace sieve::plugin::proxy
