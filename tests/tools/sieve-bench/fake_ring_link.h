// SPDX-License-Identifier: Apache-2.0
// In-process fake ring links for the ring collectives' tests: every node a thread, every ring
// edge a channel that matches sends to receives in posting order, completes a send only once its
// receive took the data (a rendezvous, the strictest transport), and now and then refuses a
// request or reports it late.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "tools/sieve-bench/pruning.h"
#include "tools/sieve-bench/ring_allreduce.h"

namespace sieve::bench::fake_ring {

struct FakeRequest {
  bool is_send;
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
  size_t received = 0;
  bool done = false;
};

class FakeChannel {
 public:
  void post_send(FakeRequest* r) {
    std::lock_guard<std::mutex> lock(mutex_);
    sends_.push_back(r);
    match();
  }
  void post_recv(FakeRequest* r) {
    std::lock_guard<std::mutex> lock(mutex_);
    recvs_.push_back(r);
    match();
  }
  bool done(FakeRequest* r) {
    std::lock_guard<std::mutex> lock(mutex_);
    return r->done;
  }

 private:
  void match() {
    while (!sends_.empty() && !recvs_.empty()) {
      FakeRequest* s = sends_.front();
      FakeRequest* r = recvs_.front();
      sends_.pop_front();
      recvs_.pop_front();
      ASSERT_LE(s->bytes, r->bytes) << "a send larger than its receive";
      std::memcpy(r->dst, s->src, s->bytes);
      r->received = s->bytes;
      s->done = r->done = true;
    }
  }
  std::mutex mutex_;
  std::deque<FakeRequest*> sends_, recvs_;
};

class FakeLink : public RingLink {
 public:
  FakeLink(FakeChannel& to_next, FakeChannel& from_prev, uint64_t seed)
      : next_(to_next), prev_(from_prev), rng_(seed) {}
  std::string post_send(const void* data, size_t bytes, void** request) override {
    if (busy()) return "";
    auto* r = own(FakeRequest{true, data, nullptr, bytes});
    next_.post_send(r);
    *request = r;
    return "";
  }
  std::string post_recv(void* data, size_t bytes, void** request) override {
    if (busy()) return "";
    auto* r = own(FakeRequest{false, nullptr, data, bytes});
    prev_.post_recv(r);
    *request = r;
    return "";
  }
  std::string test(void* request, bool* done, size_t* bytes) override {
    auto* r = static_cast<FakeRequest*>(request);
    *done = !busy() && (r->is_send ? next_ : prev_).done(r);
    if (*done) { *bytes = r->is_send ? r->bytes : r->received; }
    return "";
  }

 private:
  bool busy() { return rng_.next() % 4 == 0; }  // a quarter of all calls: "not now"
  FakeRequest* own(FakeRequest request) {
    requests_.push_back(std::make_unique<FakeRequest>(request));
    return requests_.back().get();
  }
  std::vector<std::unique_ptr<FakeRequest>> requests_;
  FakeChannel& next_;
  FakeChannel& prev_;
  SplitMix64 rng_;
};

}  // namespace sieve::bench::fake_ring
