// SPDX-License-Identifier: Apache-2.0
// Ranks as threads for the proxy's CPU tests: each rank has its own registry (what its trainer
// published), counters, fake backend and Proxy, over shared FakeWorlds (communicators).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/log.h"
#include "plugin/proxy/agreement.h"
#include "plugin/proxy/proxy.h"
#include "tests/plugin/proxy/fake_backend.h"

namespace sieve::plugin::proxy::testing {

inline Comm const kComm = reinterpret_cast<Comm>(0x1000);
inline Stream const kStream = reinterpret_cast<Stream>(0x2000);

inline ProxyOptions test_options() {
  ProxyOptions o;
  o.rules.min_count = 1;
  return o;
}

struct Rank {
  Rank(FakeWorld& world, int r, ProxyOptions options)
      : rank(r), backend(world, r, kComm), proxy(backend, registry, options, stats) {}
  int rank;
  compress::MaskRegistry registry;
  ProcessStats stats;
  FakeBackend backend;
  Proxy proxy;

  uint64_t publish(const void* base, const compress::Mask& m, compress::DType dtype = compress::DType::kF32) {
    uint64_t id = 0;
    EXPECT_TRUE(registry.publish(base, dtype, std::make_shared<const compress::Mask>(m), &id).ok());
    return id;
  }
  // The trainer's commit on `comm`: a collective, so every rank of it calls this at the same point.
  CommitOutcome commit(uint32_t flags = 0, Comm comm = kComm) {
    CommitOutcome outcome;
    EXPECT_EQ(settle(proxy.commit(comm, kStream, flags, &outcome), comm), 0) << backend.error;
    return outcome;
  }
  // The binding's commit: an armed token all-reduced (max, int64) through the interposed call.
  CommitOutcome token_commit(uint32_t flags = 0) {
    int64_t token[kVoteWords];
    write_no_proxy_vote(token);
    proxy.arm_commit(token, flags);
    Path path;
    EXPECT_EQ(settle(proxy.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, kComm, kStream, &path)), 0)
        << backend.error;
    EXPECT_EQ(path, Path::kCommit);
    CommitOutcome outcome;
    EXPECT_TRUE(proxy.commit_outcome(token, &outcome));
    return outcome;
  }
  // An in-place all-reduce as a trainer issues it; a non-blocking return is waited for, as
  // PyTorch does before it uses the result.
  int all_reduce(void* buf, uint64_t count, Path* path = nullptr, ReduceOp op = ReduceOp::kSum,
                 DType type = DType::kF32, Comm comm = kComm) {
    return settle(proxy.all_reduce(buf, buf, count, type, op, comm, kStream, path), comm);
  }
  int settle(int rc, Comm comm = kComm) {
    CommLiveness live;
    return rc == kResultInProgress ? backend.wait_enqueued(comm, live) : rc;
  }
};

// What a rank without the proxy does at a commit: its binding's token reaches NCCL unchanged.
inline int commit_without_proxy(FakeBackend& backend, Comm comm = kComm) {
  int64_t token[kVoteWords];
  write_no_proxy_vote(token);
  return backend.all_reduce(token, token, kVoteWords, DType::kI64, ReduceOp::kMax, comm, kStream);
}

using Ranks = std::vector<std::unique_ptr<Rank>>;

inline Ranks make_ranks(FakeWorld& world, ProxyOptions options = test_options()) {
  Ranks ranks;
  for (int r = 0; r < world.ranks(); ++r) ranks.push_back(std::make_unique<Rank>(world, r, options));
  return ranks;
}

// Runs body(rank) on every rank at once and waits for all.
inline void run_ranks(Ranks& ranks, const std::function<void(Rank&)>& body) {
  std::vector<std::thread> threads;
  for (auto& r : ranks) threads.emplace_back([&body, &r] { body(*r); });
  for (auto& t : threads) t.join();
}

// Rank r's gradient: nonzero exactly where the mask keeps, -0.0 where it prunes (as torch's prune).
inline std::vector<float> gradient(const compress::Mask& m, int rank, int step = 0) {
  std::vector<float> g(m.count());
  for (uint64_t i = 0; i < m.count(); ++i)
    g[i] = m.test(i) ? float(rank + 1) * 0.5f + float(i % 17) + float(step) : -0.0f;
  return g;
}

inline std::vector<float> dense_sum(const compress::Mask& m, int ranks, int step = 0) {
  std::vector<float> sum(m.count(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> g = gradient(m, r, step);
    for (uint64_t i = 0; i < m.count(); ++i) sum[i] += g[i];
  }
  return sum;
}

inline void expect_exact(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

// Every third element kept, plus a long kept run in the middle.
inline compress::Mask thirds_mask(uint64_t count) {
  compress::Mask m(count, false);
  for (uint64_t i = 0; i < count; i += 3) m.set_range(i, 1, true);
  if (count > 500) m.set_range(400, 100, true);
  return m;
}

// The proxy's log lines while alive (NCCL's logger in a job; here, a test's evidence).
class LogCapture {
 public:
  LogCapture() {
    instance() = this;
    log::set_sink(&sink);
  }
  ~LogCapture() {
    log::set_sink(nullptr);
    instance() = nullptr;
  }
  std::vector<std::string> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  size_t count(const std::string& needle) const {
    size_t n = 0;
    for (const std::string& l : lines()) n += l.find(needle) != std::string::npos;
    return n;
  }

 private:
  static LogCapture*& instance() {
    static LogCapture* current = nullptr;
    return current;
  }
  static void sink(log::Level, log::Subsystem, const char*, int, const char* message) {
    if (LogCapture* c = instance()) {
      std::lock_guard lock(c->mutex_);
      c->lines_.push_back(message);
    }
  }
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

}  // namespace sieve::plugin::proxy::testing
