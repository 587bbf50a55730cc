#include "tests/proxy/fake_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace sieve::plugin::proxy::testing {

namespace {

template <typename T> T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
    default: return a;
  }
}

// out[i] = op over ranks of in_r[offset + i], i < count; `ranks` inputs.
template <typename T>
std::vector<T> reduce_into(const std::vector<const void*>& ins, uint64_t offset, uint64_t count, ReduceOp op) {
  std::vector<T> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(ins[0])[offset + i];
    for (size_t r = 1; r < ins.size(); ++r) acc = combine(acc, static_cast<const T*>(ins[r])[offset + i], op);
    if (op == ReduceOp::kAvg) acc = acc / T(ins.size());
    out[i] = acc;
  }
  return out;
}

bool nonzero_at(const void* buf, size_t esize, uint64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(buf) + i * esize, esize);
  const uint64_t sign = 1ull << (esize * 8 - 1);
  return (bits & ~sign) != 0;
}

}  // namespace

// --- FakeWorld --------------------------------------------------------------------------------

bool FakeWorld::collective(int rank, Kind kind, const void* in, void* out, uint64_t count, ElemType type, ReduceOp op,
                           int width, std::string* error) {
  std::unique_lock lock(mutex_);
  if (!abort_reason_.empty()) {
    *error = "the communicator was aborted: " + abort_reason_;
    return false;
  }
  const uint64_t my_generation = generation_;
  slots_[size_t(rank)] = Slot{kind, in, out, count, type, op, width};
  if (++arrived_ == ranks_) {
    failed_ = false;
    for (int r = 1; r < ranks_; ++r) {
      const Slot& a = slots_[0];
      const Slot& b = slots_[size_t(r)];
      if (a.kind != b.kind || a.count != b.count || a.type != b.type || a.op != b.op || a.width != b.width)
        failed_ = true;
    }
    if (failed_) ++mismatches_;
    else {
      reduce();
      ++completed_;
    }
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, std::chrono::seconds(20),
                           [&] { return generation_ != my_generation || !abort_reason_.empty(); })) {
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

void FakeWorld::reduce() {
  const Slot& first = slots_[0];
  std::vector<const void*> ins;
  for (const Slot& s : slots_) ins.push_back(s.in);
  // Results are computed before any output is written: inputs and outputs may overlap (in place).
  auto write = [](void* out, const void* data, size_t bytes) { std::memmove(out, data, bytes); };
  switch (first.kind) {
    case Kind::kExchange: {
      if (first.width == 8) {
        std::vector<uint64_t> r(first.count, 0);
        for (const void* in : ins)
          for (uint64_t i = 0; i < first.count; ++i) r[i] = std::max(r[i], static_cast<const uint64_t*>(in)[i]);
        for (Slot& s : slots_) write(s.out, r.data(), r.size() * 8);
      } else {
        std::vector<uint8_t> r(first.count, 0);
        for (const void* in : ins)
          for (uint64_t i = 0; i < first.count; ++i) r[i] = std::max(r[i], static_cast<const uint8_t*>(in)[i]);
        for (Slot& s : slots_) write(s.out, r.data(), r.size());
      }
      return;
    }
    case Kind::kAllReduce:
      if (first.type == ElemType::kF64) {
        std::vector<double> r = reduce_into<double>(ins, 0, first.count, first.op);
        for (Slot& s : slots_) write(s.out, r.data(), r.size() * 8);
      } else {
        std::vector<float> r = reduce_into<float>(ins, 0, first.count, first.op);
        for (Slot& s : slots_) write(s.out, r.data(), r.size() * 4);
      }
      return;
    case Kind::kReduceScatter: {
      std::vector<std::vector<unsigned char>> results;
      const size_t es = element_size(first.type);
      for (int r = 0; r < ranks_; ++r) {
        std::vector<unsigned char> bytes(first.count * es);
        if (first.type == ElemType::kF64) {
          std::vector<double> v = reduce_into<double>(ins, uint64_t(r) * first.count, first.count, first.op);
          std::memcpy(bytes.data(), v.data(), bytes.size());
        } else {
          std::vector<float> v = reduce_into<float>(ins, uint64_t(r) * first.count, first.count, first.op);
          std::memcpy(bytes.data(), v.data(), bytes.size());
        }
        results.push_back(std::move(bytes));
      }
      for (int r = 0; r < ranks_; ++r) write(slots_[size_t(r)].out, results[size_t(r)].data(), results[size_t(r)].size());
      return;
    }
    case Kind::kAllGather: {
      const size_t es = element_size(first.type), part = first.count * es;
      std::vector<unsigned char> all(part * size_t(ranks_));
      for (int r = 0; r < ranks_; ++r) std::memcpy(all.data() + size_t(r) * part, ins[size_t(r)], part);
      for (Slot& s : slots_) write(s.out, all.data(), all.size());
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
    std::fprintf(stderr, "FATAL: device work uses a layout that was freed (a captured plan did not outlive its graph)\n");
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

void FakeBackend::join(Comm comm, FakeWorld& world, int rank) { members_[comm] = Member{&world, rank}; }

FakeBackend::Member* FakeBackend::member(Comm comm) {
  auto it = members_.find(comm);
  return it == members_.end() ? nullptr : &it->second;
}

bool FakeBackend::fault(int& countdown) { return countdown > 0 && --countdown == 0; }

int FakeBackend::run(const Op& op) {
  Member* m = member(op.comm);
  if (!m) {
    if (error.empty()) error = "a collective on an unknown communicator";
    return kResultInvalidArgument;
  }
  last_count = op.count;
  if (!m->world->collective(m->rank, op.kind, op.in, op.out, op.count, op.type, op.op, 0, &error))
    return kResultRemoteError;
  return kResultSuccess;
}

int FakeBackend::issue(const Op& op) {
  ++collectives;
  static const char* const names[] = {"all_reduce", "reduce_scatter", "all_gather", "exchange"};
  log.push_back(std::string(names[int(op.kind)]) + ":" + std::to_string(op.count));
  if (capturing_) {
    graph_.push_back([this, op] { return run(op); });
    return kResultSuccess;
  }
  if (group_depth_ > 0) {
    queued_.push_back(op);
    return kResultSuccess;
  }
  if (nonblocking) {
    pending_.push_back(op);
    return kResultInProgress;
  }
  return run(op);
}

int FakeBackend::all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm comm,
                            Stream) {
  return issue(Op{FakeWorld::Kind::kAllReduce, comm, send, recv, count, type, op});
}

int FakeBackend::reduce_scatter(const void* send, void* recv, uint64_t recv_count, ElemType type, ReduceOp op,
                                Comm comm, Stream) {
  return issue(Op{FakeWorld::Kind::kReduceScatter, comm, send, recv, recv_count, type, op});
}

int FakeBackend::all_gather(const void* send, void* recv, uint64_t send_count, ElemType type, Comm comm, Stream) {
  return issue(Op{FakeWorld::Kind::kAllGather, comm, send, recv, send_count, type, ReduceOp::kSum});
}

int FakeBackend::group_start() {
  ++group_depth_;
  return kResultSuccess;
}

int FakeBackend::group_end() {
  if (group_depth_ == 0) return kResultInvalidUsage;
  if (--group_depth_ > 0) return kResultSuccess;
  std::vector<Op> queued;
  queued.swap(queued_);
  if (nonblocking) {
    pending_.insert(pending_.end(), queued.begin(), queued.end());
    return queued.empty() ? kResultSuccess : kResultInProgress;
  }
  for (const Op& op : queued)
    if (int rc = run(op)) return rc;
  return kResultSuccess;
}

int FakeBackend::group_simulate_end(void*) {
  if (group_depth_ == 0) return kResultInvalidUsage;
  if (--group_depth_ == 0) queued_.clear();  // simulated: nothing is launched
  return kResultSuccess;
}

int FakeBackend::comm_shape(Comm comm, int* nranks, int* rank) {
  Member* m = member(comm);
  if (!m) return kResultInvalidArgument;
  *nranks = m->world->ranks();
  *rank = m->rank;
  return kResultSuccess;
}

int FakeBackend::wait_enqueued(Comm comm) {
  std::vector<Op> pending;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->comm == comm) {
      pending.push_back(*it);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Op& op : pending)
    if (int rc = run(op)) return rc;
  return kResultSuccess;
}

int FakeBackend::abort_comm(Comm comm) {
  ++aborts;
  if (Member* m = member(comm)) m->world->abort("rank " + std::to_string(m->rank) + " aborted it");
  return kResultSuccess;
}

int FakeBackend::capture_status(Stream, bool* capturing) {
  if (fault(faults.capture_status)) return kResultCudaError;
  *capturing = capturing_;
  return kResultSuccess;
}

int FakeBackend::exchange_max(Comm comm, Stream, void* host, uint64_t count, int width, DeviceBuffer& staging) {
  ++votes;
  log.push_back("exchange:" + std::to_string(count) + "x" + std::to_string(width));
  // A vote waits for its result: inside a group or a capture it would wait forever.
  if (group_depth_ > 0 || capturing_) {
    if (error.empty()) error = "exchange_max called inside a group or during capture";
    return kResultInvalidUsage;
  }
  if (staging.bytes() < count * uint64_t(width)) {
    if (error.empty()) error = "exchange_max: staging too small";
    return kResultInvalidArgument;
  }
  Member* m = member(comm);
  if (!m) return kResultInvalidArgument;
  std::vector<unsigned char> in(static_cast<unsigned char*>(host), static_cast<unsigned char*>(host) + count * width);
  if (!m->world->collective(m->rank, FakeWorld::Kind::kExchange, in.data(), host, count, ElemType::kOther,
                            ReduceOp::kMax, width, &error))
    return kResultRemoteError;
  return kResultSuccess;
}

int FakeBackend::create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                               std::unique_ptr<DeviceLayout>* out) {
  if (capturing_ || fault(faults.create_layout)) return kResultCudaError;
  auto layout = std::make_unique<FakeLayout>();
  layout->span = count;
  for (uint64_t i = 0; i < count; ++i)
    if (mask.test(first + i)) layout->kept.push_back(i);
  *out = std::move(layout);
  return kResultSuccess;
}

int FakeBackend::create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) {
  if (capturing_ || fault(faults.create_buffer)) return kResultCudaError;
  *out = std::make_unique<FakeBuffer>(bytes);
  return kResultSuccess;
}

bool FakeBackend::device_work(std::function<void()> work) {
  if (capturing_) {
    graph_.push_back([work] {
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
      std::memcpy(static_cast<unsigned char*>(compact) + j * es, static_cast<const unsigned char*>(src) + l.kept[j] * es, es);
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

int FakeBackend::create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) {
  if (capturing_ || fault(faults.create_buffer)) return kResultCudaError;
  auto slot = std::make_unique<FakeSlot>();
  slot->bitmap.assign((count + 7) / 8, 0);
  *out = std::move(slot);
  return kResultSuccess;
}

int FakeBackend::record_nonzero(LagSlot& slot, const void* buf, uint64_t count, ElemType type, Stream) {
  if (capturing_) return kResultInvalidUsage;  // a record read later by the host cannot live in a graph
  auto& s = static_cast<FakeSlot&>(slot);
  std::fill(s.bitmap.begin(), s.bitmap.end(), 0);
  for (uint64_t i = 0; i < count; ++i)
    if (nonzero_at(buf, element_size(type), i)) s.bitmap[i / 8] |= uint8_t(1u << (i % 8));
  return kResultSuccess;
}

int FakeBackend::record_flag(LagSlot& slot, const void* flag, size_t es, DeviceBuffer& counter, Stream) {
  if (capturing_) return kResultInvalidUsage;
  auto& s = static_cast<FakeSlot&>(slot);
  s.flag = 0;
  std::memcpy(&s.flag, flag, es);
  std::memcpy(&s.violations, counter.data(), sizeof s.violations);
  return kResultSuccess;
}

int FakeBackend::read_nonzero(LagSlot& slot, Comm, uint64_t count, compress::Mask* nonzero) {
  *nonzero = compress::Mask::from_bitmap(static_cast<FakeSlot&>(slot).bitmap.data(), count);
  return kResultSuccess;
}

int FakeBackend::read_flag(LagSlot& slot, Comm, uint64_t* flag_bits, uint64_t* local_violations) {
  auto& s = static_cast<FakeSlot&>(slot);
  *flag_bits = s.flag;
  *local_violations = s.violations;
  return kResultSuccess;
}

int FakeBackend::replay() {
  for (auto& step : graph_)
    if (int rc = step()) return rc;
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy::testing
