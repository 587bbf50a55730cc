#include "tests/proxy/fake_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sieve::plugin::proxy::testing {

bool FakeWorld::rendezvous(int rank, void* buf, uint64_t count, int kind, const std::function<void()>& reduce,
                           std::string* error) {
  std::unique_lock lock(mutex_);
  const uint64_t my_generation = generation_;
  buffers_[rank] = buf;
  counts_[rank] = count;
  kinds_[rank] = kind;
  if (++arrived_ == ranks_) {
    failed_ = false;
    for (int r = 1; r < ranks_; ++r)
      if (counts_[r] != counts_[0] || kinds_[r] != kinds_[0]) failed_ = true;
    if (failed_) ++mismatches_;
    else reduce();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, std::chrono::seconds(5), [&] { return generation_ != my_generation; })) {
    --arrived_;
    *error = "rank " + std::to_string(rank) + ": the other ranks never joined the collective";
    return false;
  }
  if (failed_) {
    *error = "ranks called a collective with different counts or kinds (NCCL would hang)";
    return false;
  }
  return true;
}

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
template <typename T> void reduce_all(std::vector<void*>& bufs, int ranks, uint64_t count, ReduceOp op) {
  for (uint64_t i = 0; i < count; ++i) {
    T acc = static_cast<T*>(bufs[0])[i];
    for (int r = 1; r < ranks; ++r) acc = combine(acc, static_cast<T*>(bufs[r])[i], op);
    if (op == ReduceOp::kAvg) acc = acc / T(ranks);
    for (int r = 0; r < ranks; ++r) static_cast<T*>(bufs[r])[i] = acc;
  }
}
}  // namespace

bool FakeWorld::all_reduce(int rank, void* buf, uint64_t count, ElemType type, ReduceOp op, std::string* error) {
  return rendezvous(rank, buf, count, 1, [&] {
    if (type == ElemType::kF64) reduce_all<double>(buffers_, ranks_, count, op);
    else reduce_all<float>(buffers_, ranks_, count, op);
  }, error);
}

bool FakeWorld::all_reduce_max_u64(int rank, uint64_t* words, uint64_t count, std::string* error) {
  return rendezvous(rank, words, count, 2, [&] { reduce_all<uint64_t>(buffers_, ranks_, count, ReduceOp::kMax); },
                    error);
}

uint64_t FakeWorld::mismatches() const {
  std::lock_guard lock(mutex_);
  return mismatches_;
}

int FakeBackend::run(const Pending& p) {
  const size_t es = element_size(p.type);
  if (p.send != p.recv) std::memcpy(p.recv, p.send, p.count * es);
  last_count = p.count;
  if (!world_.all_reduce(rank_, p.recv, p.count, p.type, p.op, &error)) return kResultInternalError;
  return kResultSuccess;
}

int FakeBackend::all_reduce(const void* send, void* recv, uint64_t count, ElemType type, ReduceOp op, Comm, Stream) {
  ++all_reduces;
  log.push_back("all_reduce");
  Pending p{send, recv, count, type, op};
  if (group_depth > 0) {
    queued_.push_back(p);
    return kResultSuccess;
  }
  return run(p);
}

int FakeBackend::group_start() {
  ++group_depth;
  return kResultSuccess;
}

int FakeBackend::group_end() {
  log.push_back("group_end");
  if (group_depth == 0) return kResultInvalidArgument;
  if (--group_depth > 0) return kResultSuccess;
  std::vector<Pending> queued;
  queued.swap(queued_);
  for (const Pending& p : queued)
    if (int rc = run(p)) return rc;
  return kResultSuccess;
}

int FakeBackend::agree(Comm, Stream, uint64_t hash, bool* all_equal) {
  ++agrees;
  log.push_back("agree");
  uint64_t words[2] = {hash, ~hash};
  if (!world_.all_reduce_max_u64(rank_, words, 2, &error)) return kResultInternalError;
  *all_equal = words[0] == hash && words[1] == ~hash;
  return kResultSuccess;
}

int FakeBackend::create_plan(const compress::Mask& mask, ElemType type, bool with_check,
                             std::unique_ptr<DevicePlan>* out) {
  if (capturing_) return kResultInternalError;  // allocation during capture: the proxy must not
  ++plans_created;
  auto plan = std::make_unique<FakePlan>();
  plan->mask = mask;
  for (uint64_t i = 0; i < mask.count(); ++i)
    if (mask.test(i)) plan->kept.push_back(i);
  plan->esize = element_size(type);
  plan->checked = with_check;
  plan->bytes.assign((plan->kept.size() + 1) * plan->esize, 0);
  *out = std::move(plan);
  return kResultSuccess;
}

int FakeBackend::gather(DevicePlan& plan, const void* src, Stream) {
  ++gathers;
  log.push_back("gather");
  auto& p = static_cast<FakePlan&>(plan);
  for (size_t j = 0; j < p.kept.size(); ++j)
    std::memcpy(&p.bytes[j * p.esize], static_cast<const unsigned char*>(src) + p.kept[j] * p.esize, p.esize);
  return kResultSuccess;
}

int FakeBackend::scatter(DevicePlan& plan, void* dst, Stream) {
  ++scatters;
  log.push_back("scatter");
  auto& p = static_cast<FakePlan&>(plan);
  std::memset(dst, 0, p.mask.count() * p.esize);
  for (size_t j = 0; j < p.kept.size(); ++j)
    std::memcpy(static_cast<unsigned char*>(dst) + p.kept[j] * p.esize, &p.bytes[j * p.esize], p.esize);
  return kResultSuccess;
}

namespace {
bool nonzero_at(const void* buf, size_t esize, uint64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(buf) + i * esize, esize);
  const uint64_t sign = 1ull << (esize * 8 - 1);
  return (bits & ~sign) != 0;
}
}  // namespace

int FakeBackend::check(DevicePlan& plan, const void* src, const FlagEncoding& encoding, Stream) {
  log.push_back("check");
  auto& p = static_cast<FakePlan&>(plan);
  if (!p.checked) return kResultInternalError;
  p.violations = 0;
  for (uint64_t i = 0; i < p.mask.count(); ++i)
    if (!p.mask.test(i) && nonzero_at(src, p.esize, i)) ++p.violations;
  const uint64_t flag = p.violations ? encoding.bad_bits : encoding.ok_bits;
  std::memcpy(&p.bytes[p.kept.size() * p.esize], &flag, p.esize);
  return kResultSuccess;
}

int FakeBackend::create_slot(uint64_t count, std::unique_ptr<LagSlot>* out) {
  if (capturing_) return kResultInternalError;
  auto slot = std::make_unique<FakeSlot>();
  slot->bitmap.assign((count + 7) / 8, 0);
  *out = std::move(slot);
  return kResultSuccess;
}

int FakeBackend::record_nonzero(LagSlot& slot, const void* buf, uint64_t count, ElemType type, Stream) {
  log.push_back("record_nonzero");
  auto& s = static_cast<FakeSlot&>(slot);
  std::fill(s.bitmap.begin(), s.bitmap.end(), 0);
  for (uint64_t i = 0; i < count; ++i)
    if (nonzero_at(buf, element_size(type), i)) s.bitmap[i / 8] |= uint8_t(1u << (i % 8));
  return kResultSuccess;
}

int FakeBackend::record_flag(LagSlot& slot, DevicePlan& plan, Stream) {
  log.push_back("record_flag");
  auto& s = static_cast<FakeSlot&>(slot);
  auto& p = static_cast<FakePlan&>(plan);
  s.flag = 0;
  std::memcpy(&s.flag, &p.bytes[p.kept.size() * p.esize], p.esize);
  s.violations = p.violations;
  return kResultSuccess;
}

int FakeBackend::read_nonzero(LagSlot& slot, uint64_t count, compress::Mask* nonzero) {
  log.push_back("read");
  auto& s = static_cast<FakeSlot&>(slot);
  ++s.reads;
  *nonzero = compress::Mask::from_bitmap(s.bitmap.data(), count);
  return kResultSuccess;
}

int FakeBackend::read_flag(LagSlot& slot, uint64_t* flag_bits, uint64_t* local_violations) {
  log.push_back("read");
  auto& s = static_cast<FakeSlot&>(slot);
  ++s.reads;
  *flag_bits = s.flag;
  *local_violations = s.violations;
  return kResultSuccess;
}

}  // namespace sieve::plugin::proxy::testing
