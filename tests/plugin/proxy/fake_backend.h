// SPDX-License-Identifier: Apache-2.0
// A DeviceBackend on host memory for the proxy's CPU tests. Ranks are threads of one test; each
// communicator is a FakeWorld whose collectives are real rendezvous: they reduce, scatter and gather
// every rank's data, and when ranks disagree on what they call (the kind of collective or its count:
// what would hang or corrupt NCCL) every rank's call fails at once, so consistency bugs show as errors,
// not hangs. The fake is strict where NCCL and CUDA are: inside a group collectives run only at its
// end, and there as NCCL launches a group: every communicator's collectives at once (each
// communicator's in order), never one communicator after another on the calling thread, so one
// thread may drive several ranks of one communicator (ncclCommInitAll) and ranks may order
// communicators differently within a group; on a non-blocking communicator they run only when the caller waits for
// them; during capture nothing runs (it is recorded and runs on replay; a captured group's collectives are recorded at
// the group's end, as NCCL captures them); waiting for an exchange inside a group or a
// capture, an allocation during capture, or a staging buffer too small is an error. Reductions are
// NCCL's: f16 and bf16 are widened to f32, reduced rank by rank and rounded back to nearest-even at
// each step; an exchange is an all-reduce (max) of int64 or uint8 words, the same collective as a
// binding's commit token, so a rank without a proxy and one with it meet in one collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy::testing {

class FakeWorld {
 public:
  // `patience`: how long a rank waits for the others before its collective fails.
  explicit FakeWorld(int ranks, std::chrono::milliseconds patience = std::chrono::seconds(20))
      : ranks_(ranks), patience_(patience), slots_(size_t(ranks)) {}
  int ranks() const { return ranks_; }

  enum class Kind { kAllReduce, kReduceScatter, kAllGather };
  // One rank's part of a collective: `in` holds its input, `out` receives its result. count is the
  // per-rank element count of the collective as NCCL sees it (recv count for reduce-scatter, send
  // count for all-gather). false (with *error) on a mismatch, an abort, or a rank that never came.
  // kU8 elements are a union merge's masks, bytes.
  bool collective(int rank, Kind kind, const void* in, void* out, uint64_t count, DType type, ReduceOp op,
                  std::string* error);
  void abort(const std::string& why);
  bool aborted() const;
  // A pre-multiplied sum rank `rank` creates (ncclRedOpCreatePreMulSum): NCCL's next user handle.
  int32_t create_premul_sum(int rank, double scalar);
  uint64_t mismatches() const;
  uint64_t completed() const;

 private:
  struct Slot {
    Kind kind;
    const void* in;
    void* out;
    uint64_t count;
    DType type;
    ReduceOp op;
  };
  void reduce();
  const int ranks_;
  const std::chrono::milliseconds patience_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::map<std::pair<int, int32_t>, double> premul_scalars_;  // by rank and handle
  std::map<int, int32_t> premul_next_;                        // by rank
  uint64_t generation_ = 0;
  int arrived_ = 0;
  bool failed_ = false;
  std::string abort_reason_;
  uint64_t mismatches_ = 0, completed_ = 0;
};

struct FakeLayout : DeviceLayout {
  FakeLayout();
  ~FakeLayout() override;
  static int live();
  // Device work on a freed layout is what a graph replay after its plan was freed would do.
  static void expect_live(const FakeLayout* layout);
  std::vector<uint64_t> kept;  // element indices, relative to the layout's first element
  uint64_t span = 0;
  uint64_t count() const override { return span; }
  uint64_t nnz() const override { return kept.size(); }

 private:
  static std::set<const FakeLayout*>& live_set();
  static std::mutex& live_mutex();
};

struct FakeBuffer : DeviceBuffer {
  explicit FakeBuffer(uint64_t n) : bytes_(n, 0xAB) { ++live; }  // uninitialised-looking, like cudaMalloc
  ~FakeBuffer() override { --live; }
  static inline std::atomic<int> live{0};
  void* data() override { return bytes_.data(); }
  uint64_t bytes() const override { return bytes_.size(); }
  std::vector<unsigned char> bytes_;
};

struct FakeExchange : Exchange {
  explicit FakeExchange(uint64_t n) : host_(n, 0xAB), device(n, 0xAB) {}
  void* host() override { return host_.data(); }
  uint64_t bytes() const override { return host_.size(); }
  std::vector<unsigned char> host_, device;
};

struct FakeCounter : ViolationCounter {
  uint64_t device = 0;
  std::atomic<uint64_t> host{0};
  uint64_t seen() const override { return host.load(); }
};

struct FakeSlot : LagSlot {
  std::vector<uint8_t> bitmap;
  uint64_t flag = 0, violations = 0;
};

// Failures to inject on one rank (counted down; 0 = never, 1 = the next call fails, ...).
struct FakeFaults {
  int create_buffer = 0;
  int create_layout = 0;
  int create_exchange = 0;
  int gather = 0;
  int capture_status = 0;
};

class FakeBackend : public DeviceBackend {
 public:
  FakeBackend(FakeWorld& world, int rank, Comm comm);
  // Another communicator this rank belongs to.
  void join(Comm comm, FakeWorld& world, int rank);

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
  // The job's teardown reaching NCCL (ncclCommDestroy): the communicator at `comm` is gone for every
  // rank (its world fails their calls); on a handle an abort freed, a use after free (recorded).
  void destroy_comm(Comm comm);
  bool abort_keeps_handle() const override { return keeps_handle; }
  // A poll that takes a while inside "NCCL", as a real one may: an abort that frees the handle
  // meanwhile, or a poll of a freed handle, is recorded as a use after free.
  int comm_async_error(Comm comm, int* error) override;
  int capture_status(Stream stream, bool* capturing) override;
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
  int create_counter(std::unique_ptr<ViolationCounter>* out) override;
  int count_pruned(const DeviceLayout& layout, size_t element_size, const void* src, ViolationCounter& counter,
                   bool copy, Stream stream) override;
  int create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) override;
  int record_nonzero(LagSlot& slot, const void* buf, uint64_t count, DType type, Stream stream) override;
  int record_flag(LagSlot& slot, const void* flag, size_t element_size, DeviceBuffer& counter, Stream stream) override;
  int download(const void* device, void* host, uint64_t bytes, Stream stream, Comm comm, CommLiveness& live) override;
  int read_nonzero(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t count, compress::Mask* nonzero) override;
  int read_flag(LagSlot& slot, Comm comm, CommLiveness& live, uint64_t* flag_bits, uint64_t* local_violations) override;

  // Graph capture: while capturing, device work and collectives are recorded; replay() runs them.
  // One graph per thread: a new capture destroys the last one, as does destroy_graph(), and with it
  // what keep_for_graph() kept for it.
  void begin_capture() {
    destroy_graph();
    me().capturing = true;
  }
  void end_capture() { me().capturing = false; }
  int replay();
  void destroy_graph() {
    std::vector<std::shared_ptr<void>> kept;
    kept.swap(me().kept);
    me().graph.clear();
  }
  bool keep_for_graph(Stream stream, std::shared_ptr<void> keep) override;
  bool graphs_keep = true;  // false: a backend that cannot tie lifetimes to graphs (the caller keeps)

  bool nonblocking = false;  // collectives return kResultInProgress and run at wait_enqueued()
  // Nonzero: a group's communicators start in a random order, each collective after a random delay
  // (seeded), so that nothing may assume one communicator's work runs before another's.
  uint64_t interleave_seed = 0;
  bool keeps_handle = false;  // abort_comm revokes (NCCL >= 2.28.7) instead of freeing the handle
  FakeFaults faults;
  // What the proxy did, for tests: kinds and counts of real collectives, in order (read them once the
  // rank's threads are done); per communicator too, where several threads drive several.
  std::vector<std::string> log;
  std::map<Comm, std::vector<std::string>> comm_log;
  std::atomic<int> votes{0}, collectives{0}, gathers{0}, scatters{0};
  std::atomic<int> aborts{0};  // abort_comm may come from another thread (a watchdog)
  std::atomic<uint64_t> last_count{0};
  std::string error;  // the first failure's reason

 private:
  struct Member {
    FakeWorld* world;
    int rank;
  };
  struct Op {
    FakeWorld::Kind kind;
    Comm comm;
    const void* in;
    void* out;
    uint64_t count;
    DType type;
    ReduceOp op;
  };
  int issue(const Op& op);
  int run(const Op& op);
  // A launched group: every communicator's collectives at once, each communicator's in order.
  int run_batch(const std::vector<Op>& ops);
  bool device_work(std::function<void()> work);  // runs now, or records it during capture
  bool fault(int& countdown);
  Member* member(Comm comm);

  // NCCL's group state and a stream's capture belong to the calling thread.
  struct ThreadState {
    int depth = 0;
    std::vector<Op> queued;  // collectives of the open group
    bool capturing = false;
    std::vector<std::function<int()>> graph;
    std::vector<std::shared_ptr<void>> kept;  // alive while the graph is
  };
  ThreadState& me();
  void set_error(const std::string& why);

  std::map<Comm, Member> members_;  // fixed before the ranks run
  std::mutex mutex_;                // the rest may be used from a rank's several threads
  // Keyed by a number each thread draws once, never by std::thread::id: an id is reused once its
  // thread ends, and a new thread must not inherit a dead one's state (capture, group depth).
  std::map<uint64_t, ThreadState> threads_;
  // Launched on a non-blocking communicator, not yet enqueued: one batch per call or group.
  std::vector<std::vector<Op>> pending_;
  std::mt19937_64 rng_;  // interleave_seed's, drawn under mutex_
  bool seeded_ = false;
  std::set<Comm> freed_;         // handles abort_comm freed (a rejoin is a new communicator there)
  std::atomic<int> polling_{0};  // comm_async_error calls inside "NCCL" now
};

}  // namespace sieve::plugin::proxy::testing
