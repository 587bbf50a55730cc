// A DeviceBackend on host memory for the proxy's CPU tests. Ranks are threads of one test sharing a
// FakeWorld, whose all-reduce is a real rendezvous: it reduces every rank's buffer, and when ranks
// disagree on the element count (what would hang NCCL) it fails the call instead, so tests see
// consistency bugs as errors within seconds. Inside a group, collectives are queued and run at the
// group's end, as NCCL does, so a scatter issued too early reads unreduced data.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy::testing {

class FakeWorld {
 public:
  explicit FakeWorld(int ranks) : ranks_(ranks) {}
  int ranks() const { return ranks_; }
  // Reduces `bytes` (count elements of f32 or f64, or u64 for agree) across ranks; false on a count
  // mismatch or when a rank does not arrive within 5 s.
  bool all_reduce(int rank, void* buf, uint64_t count, ElemType type, ReduceOp op, std::string* error);
  // For agree(): max of each u64 word.
  bool all_reduce_max_u64(int rank, uint64_t* words, uint64_t count, std::string* error);
  uint64_t mismatches() const;

 private:
  bool rendezvous(int rank, void* buf, uint64_t count, int kind, const std::function<void()>& reduce,
                  std::string* error);
  const int ranks_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<void*> buffers_ = std::vector<void*>(16);
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(16);
  std::vector<int> kinds_ = std::vector<int>(16);
  bool failed_ = false;
  uint64_t mismatches_ = 0;
  ElemType type_ = ElemType::kF32;
  ReduceOp op_ = ReduceOp::kSum;
};

struct FakePlan : DevicePlan {
  FakePlan() { ++live; }
  ~FakePlan() override { --live; }
  static inline std::atomic<int> live{0};  // plans not yet freed, across all fake backends
  compress::Mask mask;
  std::vector<uint64_t> kept;       // indices
  std::vector<unsigned char> bytes; // compact buffer (+ flag element)
  size_t esize = 0;
  bool checked = false;
  uint64_t violations = 0;
  uint64_t count() const override { return mask.count(); }
  uint64_t nnz() const override { return kept.size(); }
  bool with_check() const override { return checked; }
  void* compact() override { return bytes.data(); }
};

struct FakeSlot : LagSlot {
  std::vector<uint8_t> bitmap;
  uint64_t flag = 0, violations = 0;
  int reads = 0;
};

class FakeBackend : public DeviceBackend {
 public:
  FakeBackend(FakeWorld& world, int rank) : world_(world), rank_(rank) {}

  int all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                 Stream stream) override;
  int group_start() override;
  int group_end() override;
  bool capturing(Stream) override { return capturing_; }
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

  bool capturing_ = false;
  int agrees = 0, plans_created = 0, all_reduces = 0, gathers = 0, scatters = 0, group_depth = 0;
  uint64_t last_count = 0;       // element count of the latest real all-reduce
  std::vector<std::string> log;  // "gather", "all_reduce", "group_end", "scatter", ...
  std::string error;

 private:
  struct Pending {
    const void* send;
    void* recv;
    uint64_t count;
    ElemType type;
    ReduceOp op;
  };
  int run(const Pending& p);
  FakeWorld& world_;
  int rank_;
  std::vector<Pending> queued_;
};

}  // namespace sieve::plugin::proxy::testing
