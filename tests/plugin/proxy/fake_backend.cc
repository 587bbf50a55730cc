// SPDX-License-Identifier: Apache-2.0
#include "tests/plugin/proxy/fake_backend.h"

#include <atomic>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace sieve::plugin::proxy::testing {

namespace {

template <typename T> T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
    default: return a;
  }
}

// f16 and bf16 as NCCL reduces them: widened to f32, combined, rounded back to nearest-even.
float from_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

float from_f16(uint16_t h) {
  uint64_t bits = h;
  return float(element_value(DType::kF16, &bits));
}

uint16_t to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return uint16_t(sign | 0x7e00);
  if (a >= 65520.0f) return uint16_t(sign | 0x7c00);  // rounds to infinity
  if (a < 6.103515625e-05f) {                         // subnormal: multiples of 2^-24, nearest-even
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  }
  int exponent;
  const float m = std::frexp(a, &exponent);                            // a = m * 2^exponent, m in [0.5, 1)
  uint32_t significand = uint32_t(std::nearbyint(std::ldexp(m, 11)));  // 11 bits, nearest-even
  if (significand == 2048) significand = 1024, ++exponent;
  return uint16_t(sign | uint16_t((exponent + 14) << 10) | uint16_t(significand & 0x3ff));
}

template <typename T> struct Codec {
  using Acc = T;
  static Acc load(const void* p, uint64_t i) { return static_cast<const T*>(p)[i]; }
  static void store(void* p, uint64_t i, Acc v) { static_cast<T*>(p)[i] = v; }
};
struct F16 {
  using Acc = float;
  static Acc load(const void* p, uint64_t i) { return from_f16(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, uint64_t i, Acc v) { static_cast<uint16_t*>(p)[i] = to_f16(v); }
};
struct BF16 {
  using Acc = float;
  static Acc load(const void* p, uint64_t i) { return from_bf16(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, uint64_t i, Acc v) { static_cast<uint16_t*>(p)[i] = to_bf16(v); }
};

// out[i] = op over ranks of in_r[offset + i], i < count, rounded to the type after every step.
// `scalars`: each rank's factor of a pre-multiplied sum.
template <typename C> void reduce_into(const std::vector<const void*>& ins, uint64_t offset, uint64_t count,
                                       ReduceOp op, void* out, const std::vector<double>& scalars) {
  using Acc = typename C::Acc;
  for (uint64_t i = 0; i < count; ++i) {
    // Avg as NCCL does for floats: each input scaled by 1/n first, then summed; a pre-multiplied
    // sum scales each input by its rank's factor.
    auto input = [&](size_t r) {
      Acc v = C::load(ins[r], offset + i);
      if constexpr (std::is_floating_point_v<Acc>) {
        if (op == ReduceOp::kAvg) v = v / Acc(ins.size());
        if (is_premul_sum(op)) v = Acc(v * Acc(scalars[r]));
      }
      return v;
    };
    Acc acc = input(0);
    for (size_t r = 1; r < ins.size(); ++r) {
      acc = combine(acc, input(r), is_premul_sum(op) ? ReduceOp::kSum : op);
      C::store(out, i, acc);  // the type's own rounding at every step
      acc = C::load(out, i);
    }
    C::store(out, i, acc);
  }
}

void reduce_typed(DType type, const std::vector<const void*>& ins, uint64_t offset, uint64_t count, ReduceOp op,
                  void* out, const std::vector<double>& scalars) {
  switch (type) {
    case DType::kF32: return reduce_into<Codec<float>>(ins, offset, count, op, out, scalars);
    case DType::kF64: return reduce_into<Codec<double>>(ins, offset, count, op, out, scalars);
    case DType::kF16: return reduce_into<F16>(ins, offset, count, op, out, scalars);
    case DType::kBF16: return reduce_into<BF16>(ins, offset, count, op, out, scalars);
    case DType::kI8: return reduce_into<Codec<int8_t>>(ins, offset, count, op, out, scalars);
    case DType::kU8: return reduce_into<Codec<uint8_t>>(ins, offset, count, op, out, scalars);
    case DType::kI32: return reduce_into<Codec<int32_t>>(ins, offset, count, op, out, scalars);
    case DType::kI64: return reduce_into<Codec<int64_t>>(ins, offset, count, op, out, scalars);
  }
}

bool nonzero_at(const void* buf, size_t esize, uint64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(buf) + i * esize, esize);
  const uint64_t sign = 1ull << (esize * 8 - 1);
  return (bits & ~sign) != 0;
}

}  // namespace

// --- FakeWorld --------------------------------------------------------------------------------

bool FakeWorld::collective(int rank, Kind kind, const void* in, void* out, uint64_t count, DType type, ReduceOp op,
                           std::string* error) {
  std::unique_lock lock(mutex_);
  if (!abort_reason_.empty()) {
    *error = "the communicator was aborted: " + abort_reason_;
    return false;
  }
  const uint64_t my_generation = generation_;
  slots_[size_t(rank)] = Slot{kind, in, out, count, type, op};
  if (++arrived_ == ranks_) {
    failed_ = false;
    for (int r = 1; r < ranks_; ++r) {
      const Slot& a = slots_[0];
      const Slot& b = slots_[size_t(r)];
      if (a.kind != b.kind || a.count != b.count || a.type != b.type || a.op != b.op) failed_ = true;
    }
    if (failed_) ++mismatches_;
    else {
      reduce();
      ++completed_;
    }
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, patience_, [&] { return generation_ != my_generation || !abort_reason_.empty(); })) {
    --arrived_;
    *error = "rank " + std::to_string(rank) + ": the other ranks never joined the collective";
    return false;
  }
  if (generation_ == my_generation) {  // woken by an abort, not by the last arrival
    --arrived_;
    *error = "the communicator was aborted: " + abort_reason_;
    return false;
  }
  if (failed_) {
    *error = "ranks called different collectives or counts (NCCL would hang or corrupt data)";
    return false;
  }
  return true;
}

int32_t FakeWorld::create_premul_sum(int rank, double scalar) {
  std::lock_guard lock(mutex_);
  int32_t& next = premul_next_[rank];
  const int32_t handle = 5 + next++;  // NCCL's user ops follow its five built-in ones
  premul_scalars_[{rank, handle}] = scalar;
  return handle;
}

void FakeWorld::reduce() {
  const Slot& first = slots_[0];
  // A zero-count call writes nothing; skipping it also keeps an empty vector's null data() away from
  // memmove, which UBSan reports (the generative test draws zero-count calls).
  if (first.count == 0) return;
  std::vector<const void*> ins;
  for (const Slot& s : slots_) ins.push_back(s.in);
  std::vector<double> scalars(slots_.size(), 1.0);
  if (is_premul_sum(first.op))
    for (int r = 0; r < ranks_; ++r) scalars[size_t(r)] = premul_scalars_.at({r, premul_handle(first.op)});
  const size_t es = compress::dtype_size(first.type);
  // Results are computed before any output is written: inputs and outputs may overlap (in place).
  switch (first.kind) {
    case Kind::kAllReduce: {
      std::vector<unsigned char> r(first.count * es);
      reduce_typed(first.type, ins, 0, first.count, first.op, r.data(), scalars);
      for (Slot& s : slots_) std::memmove(s.out, r.data(), r.size());
      return;
    }
    case Kind::kReduceScatter: {
      std::vector<std::vector<unsigned char>> results;
      for (int r = 0; r < ranks_; ++r) {
        std::vector<unsigned char> bytes(first.count * es);
        reduce_typed(first.type, ins, uint64_t(r) * first.count, first.count, first.op, bytes.data(), scalars);
        results.push_back(std::move(bytes));
      }
      for (int r = 0; r < ranks_; ++r)
        std::memmove(slots_[size_t(r)].out, results[size_t(r)].data(), results[size_t(r)].size());
      return;
    }
    case Kind::kAllGather: {
      const size_t part = first.count * es;
      std::vector<unsigned char> all(part * size_t(ranks_));
      for (int r = 0; r < ranks_; ++r) std::memcpy(all.data() + size_t(r) * part, ins[size_t(r)], part);
      for (Slot& s : slots_) std::memmove(s.out, all.data(), all.size());
      return;
    }
  }
}

void FakeWorld::abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = why;
  cv_.notify_all();
}

bool FakeWorld::aborted() const {
  std::lock_guard lock(mutex_);
  return !abort_reason_.empty();
}

uint64_t FakeWorld::mismatches() const {
  std::lock_guard lock(mutex_);
  return mismatches_;
}

uint64_t FakeWorld::completed() const {
  std::lock_guard lock(mutex_);
  return completed_;
}

// --- FakeBackend ------------------------------------------------------------------------------

FakeLayout::FakeLayout() {
  std::lock_guard lock(live_mutex());
  live_set().insert(this);
}

FakeLayout::~FakeLayout() {
  std::lock_guard lock(live_mutex());
  live_set().erase(this);
}

int FakeLayout::live() {
  std::lock_guard lock(live_mutex());
  return int(live_set().size());
}

void FakeLayout::expect_live(const FakeLayout* layout) {
  std::lock_guard lock(live_mutex());
  if (!live_set().count(layout)) {
    std::fprintf(stderr,
                 "FATAL: device work uses a layout that was freed (a captured plan did not outlive its graph)\n");
    std::abort();
  }
}

std::set<const FakeLayout*>& FakeLayout::live_set() {
  static std::set<const FakeLayout*> set;
  return set;
}

std::mutex& FakeLayout::live_mutex() {
  static std::mutex mutex;
  return mutex;
}

FakeBackend::FakeBackend(FakeWorld& world, int rank, Comm comm) { join(comm, world, rank); }

void FakeBackend::join(Comm comm, FakeWorld& world, int rank) {
  members_[comm] = Member{&world, rank};
  std::lock_guard lock(mutex_);
  freed_.erase(comm);
}

FakeBackend::Member* FakeBackend::member(Comm comm) {
  auto it = members_.find(comm);
  return it == members_.end() ? nullptr : &it->second;
}

bool FakeBackend::fault(int& countdown) {
  std::lock_guard lock(mutex_);
  return countdown > 0 && --countdown == 0;
}

void FakeBackend::set_error(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (error.empty()) error = why;
}

FakeBackend::ThreadState& FakeBackend::me() {
  static std::atomic<uint64_t> next_thread{1};
  thread_local const uint64_t self = next_thread.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  return threads_[self];  // std::map references stay valid on insert
}

int FakeBackend::run(const Op& op) {
  Member* m = member(op.comm);
  if (!m) {
    set_error("a collective on an unknown communicator");
    return kResultInvalidArgument;
  }
  last_count = op.count;
  std::string why;
  if (!m->world->collective(m->rank, op.kind, op.in, op.out, op.count, op.type, op.op, &why)) {
    set_error(why);
    return kResultRemoteError;
  }
  return kResultSuccess;
}

int FakeBackend::run_batch(const std::vector<Op>& ops) {
  std::vector<std::vector<Op>> lanes;  // per communicator, in call order
  for (const Op& op : ops) {
    auto it =
        std::find_if(lanes.begin(), lanes.end(), [&op](const std::vector<Op>& l) { return l[0].comm == op.comm; });
    if (it == lanes.end()) lanes.push_back({op});
    else it->push_back(op);
  }
  if (lanes.size() == 1) {
    for (const Op& op : lanes[0])
      if (int rc = run(op)) return rc;
    return kResultSuccess;
  }
  std::vector<size_t> order(lanes.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  if (interleave_seed) {
    std::lock_guard lock(mutex_);
    if (!seeded_) rng_.seed(interleave_seed), seeded_ = true;
    std::shuffle(order.begin(), order.end(), rng_);
  }
  auto delay = [this] {
    if (!interleave_seed) return;
    uint64_t us = 0;
    {
      std::lock_guard lock(mutex_);
      us = rng_() % 300;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
  std::vector<int> rcs(lanes.size(), kResultSuccess);
  std::vector<std::thread> threads;
  for (size_t k : order)
    threads.emplace_back([this, &lanes, &rcs, &delay, k] {
      for (const Op& op : lanes[k]) {
        delay();
        if ((rcs[k] = run(op)) != kResultSuccess) return;
      }
    });
  for (std::thread& t : threads) t.join();
  for (int rc : rcs)
    if (rc) return rc;
  return kResultSuccess;
}

int FakeBackend::issue(const Op& op) {
  ++collectives;
  static const char* const names[] = {"all_reduce", "reduce_scatter", "all_gather"};
  {
    std::lock_guard lock(mutex_);
    const std::string entry = std::string(names[int(op.kind)]) + ":" + std::to_string(op.count);
    log.push_back(entry);
    comm_log[op.comm].push_back(entry);
  }
  // A group's collectives wait for its end, captured or not (NCCL captures them there, after any
  // stream work issued inside the group).
  if (me().depth > 0) {
    me().queued.push_back(op);
    return kResultSuccess;
  }
  if (me().capturing) {
    me().graph.push_back([this, op] { return run(op); });
    return kResultSuccess;
  }
  if (nonblocking) {
    std::lock_guard lock(mutex_);
    pending_.push_back({op});
    return kResultInProgress;
  }
  return run(op);
}

int FakeBackend::all_reduce(const void* send, void* recv, uint64_t count, DType type, ReduceOp op, Comm comm, Stream) {
  return issue(Op{FakeWorld::Kind::kAllReduce, comm, send, recv, count, type, op});
}

int FakeBackend::reduce_scatter(const void* send, void* recv, uint64_t recv_count, DType type, ReduceOp op, Comm comm,
                                Stream) {
  return issue(Op{FakeWorld::Kind::kReduceScatter, comm, send, recv, recv_count, type, op});
}

int FakeBackend::all_gather(const void* send, void* recv, uint64_t send_count, DType type, Comm comm, Stream) {
  return issue(Op{FakeWorld::Kind::kAllGather, comm, send, recv, send_count, type, ReduceOp::kSum});
}

int FakeBackend::group_start() {
  ++me().depth;
  return kResultSuccess;
}

int FakeBackend::group_end() {
  if (me().depth == 0) return kResultInvalidUsage;
  if (--me().depth > 0) return kResultSuccess;
  std::vector<Op> queued;
  queued.swap(me().queued);
  if (queued.empty()) return kResultSuccess;
  if (me().capturing) {
    me().graph.push_back([this, queued] { return run_batch(queued); });
    return kResultSuccess;
  }
  if (nonblocking) {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(queued));
    return kResultInProgress;
  }
  return run_batch(queued);
}

int FakeBackend::group_simulate_end(void*) {
  if (me().depth == 0) return kResultInvalidUsage;
  if (--me().depth == 0) me().queued.clear();  // simulated: nothing is launched
  return kResultSuccess;
}

int FakeBackend::comm_shape(Comm comm, int* nranks, int* rank) {
  Member* m = member(comm);
  if (!m) return kResultInvalidArgument;
  *nranks = m->world->ranks();
  *rank = m->rank;
  return kResultSuccess;
}

int FakeBackend::wait_enqueued(Comm comm, CommLiveness& live) {
  if (!live.alive()) return kResultInvalidUsage;
  // Every launch holding one of its collectives, whole: a group's other communicators run with it.
  std::vector<std::vector<Op>> pending;
  std::unique_lock lock(mutex_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (std::any_of(it->begin(), it->end(), [comm](const Op& op) { return op.comm == comm; })) {
      pending.push_back(std::move(*it));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();  // a collective waits for the other ranks
  for (const std::vector<Op>& batch : pending)
    if (int rc = run_batch(batch)) return rc;
  return kResultSuccess;
}

int FakeBackend::comm_async_error(Comm comm, int* state) {
  bool freed = false;
  {
    std::lock_guard lock(mutex_);
    freed = freed_.count(comm) != 0;
  }
  if (freed) set_error("ncclCommGetAsyncError on a communicator an abort freed");
  ++polling_;
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  --polling_;
  *state = kResultSuccess;
  return kResultSuccess;
}

int FakeBackend::abort_comm(Comm comm) {
  ++aborts;
  if (polling_.load() != 0) set_error("an abort freed the communicator while ncclCommGetAsyncError was inside it");
  if (!keeps_handle) {
    std::lock_guard lock(mutex_);
    freed_.insert(comm);
  }
  if (Member* m = member(comm)) m->world->abort("rank " + std::to_string(m->rank) + " aborted it");
  return kResultSuccess;
}

void FakeBackend::destroy_comm(Comm comm) {
  {
    std::lock_guard lock(mutex_);
    if (!freed_.insert(comm).second) {
      if (error.empty()) error = "ncclCommDestroy on a handle an abort freed";
      return;
    }
  }
  if (Member* m = member(comm)) m->world->abort("rank " + std::to_string(m->rank) + " destroyed it");
}

int FakeBackend::capture_status(Stream, bool* capturing) {
  if (fault(faults.capture_status)) return kResultCudaError;
  *capturing = me().capturing;
  return kResultSuccess;
}

bool FakeBackend::keep_for_graph(Stream, std::shared_ptr<void> keep) {
  if (!graphs_keep || !me().capturing) return false;
  me().kept.push_back(std::move(keep));
  return true;
}

int FakeBackend::create_exchange(uint64_t bytes, std::unique_ptr<Exchange>* out) {
  if (me().capturing || fault(faults.create_exchange)) return kResultCudaError;
  *out = std::make_unique<FakeExchange>(bytes);
  return kResultSuccess;
}

int FakeBackend::exchange_in(Exchange& exchange, void* device, uint64_t count, int width, Comm comm, Stream) {
  auto& ex = static_cast<FakeExchange&>(exchange);
  ++votes;
  if ((width != 1 && width != 8) || ex.bytes() < count * uint64_t(width) ||
      ex.device.size() < count * uint64_t(width)) {
    set_error("exchange_in: staging too small");
    return kResultInvalidArgument;
  }
  void* target = device ? device : ex.device.data();
  const unsigned char* host = static_cast<const unsigned char*>(ex.host());
  device_work([target, host, count, width] { std::memcpy(target, host, count * uint64_t(width)); });
  // The same collective as a binding's token (8-byte words) on a rank without the proxy.
  return issue(Op{FakeWorld::Kind::kAllReduce, comm, target, target, count, width == 8 ? DType::kI64 : DType::kU8,
                  ReduceOp::kMax});
}

int FakeBackend::exchange_out(Exchange& exchange, const void* device, uint64_t count, int width, Stream) {
  auto& ex = static_cast<FakeExchange&>(exchange);
  // Reading a result needs its collective run: not inside a group, not during capture.
  if (me().depth > 0 || me().capturing) {
    set_error("exchange_out called inside a group or during capture");
    return kResultInvalidUsage;
  }
  const void* source = device ? device : ex.device.data();
  std::memcpy(ex.host(), source, count * uint64_t(width));
  return kResultSuccess;
}

int FakeBackend::wait_exchange(Exchange&, Comm, CommLiveness& live) {
  return live.alive() ? kResultSuccess : kResultInvalidUsage;
}

int FakeBackend::download(const void* device, void* host, uint64_t bytes, Stream, Comm, CommLiveness& live) {
  if (me().capturing || me().depth > 0) {
    set_error("download called inside a group or during capture");
    return kResultInvalidUsage;
  }
  if (!live.alive()) return kResultInvalidUsage;
  std::memcpy(host, device, bytes);
  return kResultSuccess;
}

int FakeBackend::create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                               std::unique_ptr<DeviceLayout>* out) {
  if (me().capturing || fault(faults.create_layout)) return kResultCudaError;
  auto layout = std::make_unique<FakeLayout>();
  layout->span = count;
  for (uint64_t i = 0; i < count; ++i)
    if (mask.test(first + i)) layout->kept.push_back(i);
  *out = std::move(layout);
  return kResultSuccess;
}

int FakeBackend::create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) {
  if (me().capturing || fault(faults.create_buffer)) return kResultCudaError;
  *out = std::make_unique<FakeBuffer>(bytes);
  return kResultSuccess;
}

bool FakeBackend::device_work(std::function<void()> work) {
  if (me().capturing) {
    me().graph.push_back([work] {
      work();
      return int(kResultSuccess);
    });
  } else {
    work();
  }
  return true;
}

int FakeBackend::gather(const DeviceLayout& layout, size_t es, const void* src, void* compact, Stream) {
  if (fault(faults.gather)) return kResultCudaError;
  ++gathers;
  const auto& l = static_cast<const FakeLayout&>(layout);
  device_work([&l, es, src, compact] {
    FakeLayout::expect_live(&l);
    for (size_t j = 0; j < l.kept.size(); ++j)
      std::memcpy(static_cast<unsigned char*>(compact) + j * es,
                  static_cast<const unsigned char*>(src) + l.kept[j] * es, es);
  });
  return kResultSuccess;
}

int FakeBackend::scatter(const DeviceLayout& layout, size_t es, const void* compact, void* dst, Stream) {
  ++scatters;
  const auto& l = static_cast<const FakeLayout&>(layout);
  device_work([&l, es, compact, dst] {
    FakeLayout::expect_live(&l);
    std::vector<unsigned char> kept(static_cast<const unsigned char*>(compact),
                                    static_cast<const unsigned char*>(compact) + l.kept.size() * es);
    std::memset(dst, 0, l.span * es);
    for (size_t j = 0; j < l.kept.size(); ++j)
      std::memcpy(static_cast<unsigned char*>(dst) + l.kept[j] * es, kept.data() + j * es, es);
  });
  return kResultSuccess;
}

int FakeBackend::check(const DeviceLayout& layout, size_t es, const void* src, void* flag, const FlagEncoding& encoding,
                       DeviceBuffer& counter, Stream) {
  const auto& l = static_cast<const FakeLayout&>(layout);
  device_work([&l, es, src, flag, encoding, &counter] {
    uint64_t violations = 0;
    size_t k = 0;
    for (uint64_t i = 0; i < l.span; ++i) {
      if (k < l.kept.size() && l.kept[k] == i) {
        ++k;
        continue;
      }
      if (nonzero_at(src, es, i)) ++violations;
    }
    const uint64_t bits = violations ? encoding.bad_bits : encoding.ok_bits;
    std::memcpy(flag, &bits, es);
    std::memcpy(counter.data(), &violations, sizeof violations);
  });
  return kResultSuccess;
}

int FakeBackend::create_counter(std::unique_ptr<ViolationCounter>* out) {
  if (me().capturing) return kResultCudaError;
  *out = std::make_unique<FakeCounter>();
  return kResultSuccess;
}

int FakeBackend::count_pruned(const DeviceLayout& layout, size_t es, const void* src, ViolationCounter& counter,
                              bool copy, Stream) {
  const auto& l = static_cast<const FakeLayout&>(layout);
  auto& c = static_cast<FakeCounter&>(counter);
  device_work([&l, es, src, &c, copy] {
    FakeLayout::expect_live(&l);
    size_t k = 0;
    for (uint64_t i = 0; i < l.span; ++i) {
      if (k < l.kept.size() && l.kept[k] == i) {
        ++k;
        continue;
      }
      if (nonzero_at(src, es, i)) ++c.device;
    }
    if (copy) c.host = c.device;  // the copy to the host, after the count
  });
  return kResultSuccess;
}

int FakeBackend::create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) {
  if (me().capturing || fault(faults.create_buffer)) return kResultCudaError;
  auto slot = std::make_unique<FakeSlot>();
  slot->bitmap.assign((count + 7) / 8, 0);
  *out = std::move(slot);
  return kResultSuccess;
}

int FakeBackend::record_nonzero(LagSlot& slot, const void* buf, uint64_t count, DType type, Stream) {
  if (me().capturing) return kResultInvalidUsage;  // a record read later by the host cannot live in a graph
  auto& s = static_cast<FakeSlot&>(slot);
  std::fill(s.bitmap.begin(), s.bitmap.end(), 0);
  for (uint64_t i = 0; i < count; ++i)
    if (nonzero_at(buf, compress::dtype_size(type), i)) s.bitmap[i / 8] |= uint8_t(1u << (i % 8));
  return kResultSuccess;
}

int FakeBackend::record_flag(LagSlot& slot, const void* flag, size_t es, DeviceBuffer& counter, Stream) {
  if (me().capturing) return kResultInvalidUsage;
  auto& s = static_cast<FakeSlot&>(slot);
  s.flag = 0;
  std::memcpy(&s.flag, flag, es);
  std::memcpy(&s.violations, counter.data(), sizeof s.violations);
  return kResultSuccess;
}

int FakeBackend::read_nonzero(LagSlot& slot, Comm, CommLiveness& live, uint64_t count, compress::Mask* nonzero) {
  if (!live.alive()) return kResultInvalidUsage;
  nonzero->assign_bitmap(static_cast<FakeSlot&>(slot).bitmap.data(), count);
  return kResultSuccess;
}

int FakeBackend::read_flag(LagSlot& slot, Comm, CommLiveness& live, uint64_t* flag_bits, uint64_t* local_violations) {
  if (!live.alive()) return kResultInvalidUsage;
  auto& s = static_cast<FakeSlot&>(slot);
  *flag_bits = s.flag;
  *local_violations = s.violations;
  return kResultSuccess;
}

int FakeBackend::replay() {
  for (auto& step : me().graph)
    if (int rc = step()) return rc;
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy::testing
