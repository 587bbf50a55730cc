// SPDX-License-Identifier: Apache-2.0
// What the collective proxy needs from a GPU and from the real NCCL, behind one interface: the CUDA
// backend (cuda_backend.cc) implements it with the compress/cuda kernels and the NCCL entry points
// found among the loaded objects (real_nccl.h); tests implement it on host memory with ranks as
// threads (tests/plugin/proxy/fake_backend.h). Every method returns 0 or an NCCL-style result code.
//
// Ordering: everything taking a Stream is enqueued on it, without host synchronisation. The waits
// (wait_enqueued, wait_exchange, download, read_*) have no deadline of their own (a rank that gave up
// would leave the others inside a collective); they end early, with an error, when NCCL reports one
// on the communicator or when the communicator is being aborted (CommLiveness). Nothing here
// allocates except create_*().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "compress/mask.h"
#include "plugin/proxy/types.h"

namespace sieve::plugin::proxy {

// NCCL's result codes the proxy itself produces or interprets.
enum ResultCode : int {
  kResultSuccess = 0,
  kResultCudaError = 1,        // ncclUnhandledCudaError
  kResultSystemError = 2,      // ncclSystemError
  kResultInternalError = 3,    // ncclInternalError
  kResultInvalidArgument = 4,  // ncclInvalidArgument
  kResultInvalidUsage = 5,     // ncclInvalidUsage
  kResultRemoteError = 6,      // ncclRemoteError
  kResultInProgress = 7,       // ncclInProgress: a non-blocking communicator accepted the call
};

// True for codes after which the collective's own work is (or will be) on its stream.
inline bool enqueued(int rc) { return rc == kResultSuccess || rc == kResultInProgress; }

// How a host wait learns that its communicator is being aborted, so that abort always wins. An
// abort raises `aborting` first and then waits (microseconds) until `polling` is zero before NCCL
// tears the communicator down; a wait counts itself in `polling` around every call that touches the
// communicator and gives up as soon as it sees `aborting`. So no wait holds anything an abort needs,
// and none touches a communicator after its abort began.
struct CommLiveness {
  std::atomic<bool> aborting{false};
  std::atomic<int> polling{0};
  bool alive() const { return !aborting.load(std::memory_order_seq_cst); }
};

// The kept elements of a range of a mask, in device-resident form (what gather/scatter consume).
class DeviceLayout {
 public:
  virtual ~DeviceLayout() = default;
  virtual uint64_t count() const = 0;  // elements the layout spans
  virtual uint64_t nnz() const = 0;    // kept elements among them
};

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual uint64_t bytes() const = 0;
};

// Words every rank all-reduces with max (a vote, or masks OR-merged as bytes): host memory the
// caller fills and reads back, and device staging for the collective.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void* host() = 0;
  virtual uint64_t bytes() const = 0;
};

// A host-visible record one call fills asynchronously (a nonzero bitmap, or a reduced flag and a
// violation count) and the host reads a fixed number of calls later.
class LagSlot {
 public:
  virtual ~LagSlot() = default;
};

// A running count of nonzero values published masks pruned (SIEVE's mask_violations): kept on the
// device, copied after each count to host memory the host reads without waiting (it lags).
class ViolationCounter {
 public:
  virtual ~ViolationCounter() = default;
  virtual uint64_t seen() const = 0;  // the total as last copied to the host
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // --- the real NCCL (never the interposed symbols) ---
  virtual int all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm,
                         Stream stream) = 0;
  virtual int reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                             Stream stream) = 0;
  virtual int all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream stream) = 0;
  virtual int group_start() = 0;
  virtual int group_end() = 0;
  // Ends the group without launching it: its collectives are discarded.
  virtual int group_simulate_end(void* sim_info) = 0;
  virtual int comm_shape(Comm comm, int* nranks, int* rank) = 0;
  // After a call on a non-blocking communicator returned kResultInProgress: waits until its work is
  // on its stream (the communicator's state leaves ncclInProgress), or returns the communicator's error.
  virtual int wait_enqueued(Comm comm, CommLiveness& live) = 0;
  // The proxy's own abort: ncclCommRevoke where NCCL has it (the handle stays valid until the job
  // destroys it), else ncclCommAbort (the handle is dead; the proxy never passes it to NCCL again).
  virtual int abort_comm(Comm comm) = 0;
  // True when abort_comm leaves the handle valid, so the job's own teardown must still reach NCCL.
  virtual bool abort_keeps_handle() const { return false; }
  // ncclCommGetAsyncError (the proxy calls it only while no abort of `comm` can free the handle).
  virtual int comm_async_error(Comm comm, int* error) {
    (void)comm;
    *error = kResultSuccess;
    return kResultSuccess;
  }
  // True while `stream` is being captured into a CUDA graph: nothing may allocate or wait then.
  virtual int capture_status(Stream stream, bool* capturing) = 0;
  // While `stream` is being captured: keeps `keep` (what the captured work reads and writes) alive
  // until the graph being captured, and every executable graph made from it, is destroyed. False
  // when this backend cannot tie a lifetime to a graph: the caller must then keep it for good.
  virtual bool keep_for_graph(Stream stream, std::shared_ptr<void> keep) {
    (void)stream;
    (void)keep;
    return false;
  }

  // --- agreement: an all-reduce (max) of words, in three steps so that it can sit in a group ---
  virtual int create_exchange(uint64_t bytes, std::unique_ptr<Exchange>* out) = 0;
  // Copies `count` words of `width` bytes (8: int64, 1: uint8) from ex.host() to the device (to
  // `device` when given: a commit token the trainer all-reduces; else the exchange's own staging) and
  // all-reduces them there in place with max. Returns the collective's code (kResultInProgress too).
  virtual int exchange_in(Exchange& ex, void* device, uint64_t count, int width, Comm comm, Stream stream) = 0;
  // Once that collective is on the stream: copies the result back to ex.host() after it.
  virtual int exchange_out(Exchange& ex, const void* device, uint64_t count, int width, Stream stream) = 0;
  // Waits for exchange_out's copy.
  virtual int wait_exchange(Exchange& ex, Comm comm, CommLiveness& live) = 0;

  // --- device memory and kernels ---
  // The kept elements of mask bits [first, first + count).
  virtual int create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                            std::unique_ptr<DeviceLayout>* out) = 0;
  virtual int create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) = 0;
  // compact[j] = the j-th kept element of src.
  virtual int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact,
                     Stream stream) = 0;
  // dst = the kept elements from compact at their positions, exact zero everywhere else (one pass).
  virtual int scatter(const DeviceLayout& layout, size_t element_size, const void* compact, void* dst,
                      Stream stream) = 0;
  // *flag (one element) = encoding.bad_bits if src is nonzero anywhere the layout prunes, else
  // ok_bits; the number of such elements goes to `counter` (8 bytes) for record_flag.
  virtual int check(const DeviceLayout& layout, size_t element_size, const void* src, void* flag,
                    const FlagEncoding& encoding, DeviceBuffer& counter, Stream stream) = 0;
  virtual int create_counter(std::unique_ptr<ViolationCounter>* out) = 0;
  // Adds the nonzero elements of src that the layout prunes to the counter, then (with `copy`) copies
  // its total to the host, both on `stream` (legal during capture).
  virtual int count_pruned(const DeviceLayout& layout, size_t element_size, const void* src, ViolationCounter& counter,
                           bool copy, Stream stream) = 0;
  // Copies `bytes` of device memory to `host` once the stream has reached this point (SIEVE_PROXY_VERIFY).
  virtual int download(const void* device, void* host, uint64_t bytes, Stream stream, Comm comm,
                       CommLiveness& live) = 0;

  // --- learned masks: records read a fixed number of calls later ---
  virtual int create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) = 0;
  virtual int record_nonzero(LagSlot& slot, const void* buf, uint64_t count, DType type, Stream stream) = 0;
  // Records one element `flag` (a reduced violation flag) and the local violation count in `counter`.
  virtual int record_flag(LagSlot& slot, const void* flag, size_t element_size, DeviceBuffer& counter,
                          Stream stream) = 0;
  // Fills *nonzero in its own storage (Mask::assign_bitmap): no allocation once it has the size.
  virtual int read_nonzero(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t count, compress::Mask* nonzero) = 0;
  virtual int read_flag(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t* flag_bits,
                        uint64_t* local_violations) = 0;
};

}  // namespace sieve::plugin::proxy
