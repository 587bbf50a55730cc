// The ring schedule over in-process fake links: every node a thread, every ring edge a channel that
// matches sends to receives in posting order, completes a send only once its receive took the data
// (a rendezvous, the strictest transport), and now and then refuses a request or reports it late.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/bench/gradients.h"
#include "tools/bench/pruning.h"
#include "tools/bench/ring_allreduce.h"

namespace sieve::bench {
namespace {

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
  FakeLink(FakeChannel& to_next, FakeChannel& from_prev, uint64_t seed) : next_(to_next), prev_(from_prev), rng_(seed) {}
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
    if (*done) {
      *bytes = r->is_send ? r->bytes : r->received;
    }
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

void run_ring(int nranks, size_t count, DType type, const RingOptions& options) {
  const GradientPattern pattern(nranks, 1, type);
  std::vector<FakeChannel> channels(nranks);  // channels[r]: r -> r+1
  std::vector<std::vector<char>> buffers(nranks), scratch(nranks);
  std::vector<RingResult> results(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    buffers[r].resize(count * dtype_bytes(type) + 1);
    scratch[r].resize(scratch_bytes(options));
    fill_gradients(pattern, r, 0, count, type, nullptr, buffers[r].data());
  }
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      FakeLink link(channels[r], channels[(r + nranks - 1) % nranks], 100 + r);
      results[r] = ring_allreduce(link, r, nranks, buffers[r].data(), count, type, scratch[r].data(), options);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    ASSERT_EQ(results[r].error, "") << "rank " << r;
    EXPECT_EQ(check_sums(pattern, 0, count, type, nullptr, buffers[r].data()), "") << "rank " << r;
    // NCCL's ring moves 2 (N-1)/N of the buffer out of every node (exactly, up to slice rounding).
    // NCCL's ring: 2 (N-1) steps, each sending one slice (rank - step) of ceil(count / N) elements.
    const size_t slice = (count + nranks - 1) / nranks;
    size_t expected_elems = 0;
    for (int step = 0; step < 2 * (nranks - 1); ++step) {
      const size_t index = static_cast<size_t>(((r - step) % nranks + nranks) % nranks);
      expected_elems += std::min(count, (index + 1) * slice) - std::min(count, index * slice);
    }
    EXPECT_EQ(results[r].bytes_sent, expected_elems * dtype_bytes(type)) << "rank " << r;
  }
}

RingOptions small_chunks(size_t chunk_bytes, int inflight) {
  RingOptions options;
  options.chunk_bytes = chunk_bytes;
  options.max_inflight = inflight;
  options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  return options;
}

TEST(RingAllReduce, SumsExactlyAcrossShapes) {
  for (int nranks : {1, 2, 3, 4, 5}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{4099}}) {
      SCOPED_TRACE("nranks " + std::to_string(nranks) + " count " + std::to_string(count));
      run_ring(nranks, count, DType::F32, small_chunks(256, 3));
    }
  }
}

TEST(RingAllReduce, Bf16AndDeepPipelines) {
  run_ring(4, 100003, DType::BF16, small_chunks(1024, 8));
  run_ring(4, 100003, DType::F32, small_chunks(4096, 1));
  run_ring(8, 65536, DType::F32, small_chunks(512, 16));
}

TEST(RingAllReduce, MissingPeerEndsAtTheDeadline) {
  FakeChannel to_next, from_prev;  // nobody on the other ends
  FakeLink link(to_next, from_prev, 1);
  std::vector<float> buffer(64, 1.0f);
  RingOptions options = small_chunks(64, 2);
  options.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  std::vector<char> scratch(scratch_bytes(options));
  const RingResult result = ring_allreduce(link, 0, 2, buffer.data(), buffer.size(), DType::F32, scratch.data(), options);
  EXPECT_NE(result.error.find("deadline"), std::string::npos) << result.error;
}

TEST(RingAllReduce, BadArgumentsAreRefused) {
  FakeChannel a, b;
  FakeLink link(a, b, 1);
  float x = 0;
  RingOptions options;
  EXPECT_NE(ring_allreduce(link, 3, 2, &x, 1, DType::F32, nullptr, options).error, "");
  options.max_inflight = 0;
  EXPECT_NE(ring_allreduce(link, 0, 2, &x, 1, DType::F32, nullptr, options).error, "");
}

}  // namespace
}  // namespace sieve::bench
