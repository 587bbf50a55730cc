// SPDX-License-Identifier: Apache-2.0
// The ring schedule over in-process fake links (fake_ring_link.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/tools/sieve-bench/fake_ring_link.h"
#include "tools/sieve-bench/gradients.h"
#include "tools/sieve-bench/pruning.h"
#include "tools/sieve-bench/ring_allreduce.h"

namespace sieve::bench {
namespace {

using fake_ring::FakeChannel;
using fake_ring::FakeLink;

void run_ring(int nranks, size_t count, DType type, const RingOptions& options) {
  const GradientPattern pattern(nranks, 1, type);
  std::vector<FakeChannel> channels(nranks);  // channels[r]: r -> r+1
  std::vector<std::vector<char>> buffers(nranks), scratch(nranks);
  std::vector<RingResult> results(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    buffers[r].resize(count * dtype_size(type) + 1);
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
    EXPECT_EQ(results[r].bytes_sent, expected_elems * dtype_size(type)) << "rank " << r;
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
      run_ring(nranks, count, DType::kF32, small_chunks(256, 3));
    }
  }
}

TEST(RingAllReduce, Bf16AndDeepPipelines) {
  run_ring(4, 100003, DType::kBF16, small_chunks(1024, 8));
  run_ring(4, 100003, DType::kF32, small_chunks(4096, 1));
  run_ring(8, 65536, DType::kF32, small_chunks(512, 16));
}

// FSDP's halves: reduce-scatter leaves rank r the sum of shard r; all-gather gives every rank every
// rank's shard; each sends (N-1) shards and nothing else.
enum class Half { kReduceScatter, kAllGather };

void run_half(Half half, int nranks, size_t shard, DType type, const RingOptions& options) {
  const GradientPattern pattern(nranks, 3, type);
  const size_t count = shard * static_cast<size_t>(nranks), elem = dtype_size(type);
  std::vector<FakeChannel> channels(nranks);
  std::vector<std::vector<char>> buffers(nranks), scratch(nranks);
  std::vector<RingResult> results(nranks);
  for (int r = 0; r < nranks; ++r) {
    buffers[r].assign(count * elem, 0x5a);  // what an all-gather must overwrite
    scratch[r].resize(scratch_bytes(options));
    if (half == Half::kReduceScatter) {
      fill_gradients(pattern, r, 0, count, type, nullptr, buffers[r].data());
    } else {
      const size_t own = shard * static_cast<size_t>(r);
      fill_gradients(pattern, r, own, shard, type, nullptr, buffers[r].data() + own * elem);
    }
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      FakeLink link(channels[r], channels[(r + nranks - 1) % nranks], 200 + r);
      results[r] =
          half == Half::kReduceScatter
              ? ring_reduce_scatter(link, r, nranks, buffers[r].data(), count, type, scratch[r].data(), options)
              : ring_all_gather(link, r, nranks, buffers[r].data(), count, type, options);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    ASSERT_EQ(results[r].error, "") << "rank " << r;
    EXPECT_EQ(results[r].bytes_sent, static_cast<size_t>(nranks - 1) * shard * elem) << "rank " << r;
    if (half == Half::kReduceScatter) {
      const size_t own = shard * static_cast<size_t>(r);
      EXPECT_EQ(check_sums(pattern, own, shard, type, nullptr, buffers[r].data() + own * elem), "") << "rank " << r;
    } else {
      for (int owner = 0; owner < nranks; ++owner) {
        const size_t at = shard * static_cast<size_t>(owner);
        EXPECT_EQ(check_values(pattern, owner, at, shard, type, nullptr, buffers[r].data() + at * elem), "")
            << "rank " << r << ", shard of rank " << owner;
      }
    }
  }
}

TEST(RingReduceScatter, EachRankGetsTheSumOfItsOwnShard) {
  for (int nranks : {1, 2, 3, 4, 5}) {
    for (size_t shard : {size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
      SCOPED_TRACE("nranks " + std::to_string(nranks) + " shard " + std::to_string(shard));
      run_half(Half::kReduceScatter, nranks, shard, DType::kF32, small_chunks(256, 3));
    }
  }
  run_half(Half::kReduceScatter, 4, 25001, DType::kBF16, small_chunks(1024, 8));
  run_half(Half::kReduceScatter, 8, 8192, DType::kF32, small_chunks(512, 1));
}

TEST(RingAllGather, EveryRankGetsEveryShard) {
  for (int nranks : {1, 2, 3, 4, 5}) {
    for (size_t shard : {size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
      SCOPED_TRACE("nranks " + std::to_string(nranks) + " shard " + std::to_string(shard));
      run_half(Half::kAllGather, nranks, shard, DType::kF32, small_chunks(256, 3));
    }
  }
  run_half(Half::kAllGather, 4, 25001, DType::kBF16, small_chunks(1024, 8));
  run_half(Half::kAllGather, 8, 8192, DType::kF32, small_chunks(512, 1));
}

TEST(RingReduceScatter, UnevenShardsAreRefused) {
  FakeChannel a, b;
  FakeLink link(a, b, 1);
  std::vector<float> buffer(10);
  RingOptions options = small_chunks(64, 2);
  std::vector<char> scratch(scratch_bytes(options));
  const RingResult scattered = ring_reduce_scatter(link, 0, 3, buffer.data(), 10, DType::kF32, scratch.data(), options);
  EXPECT_NE(scattered.error.find("equal shards"), std::string::npos) << scattered.error;
  const RingResult gathered = ring_all_gather(link, 0, 3, buffer.data(), 10, DType::kF32, options);
  EXPECT_NE(gathered.error.find("equal shards"), std::string::npos) << gathered.error;
}

TEST(RingAllReduce, MissingPeerEndsAtTheDeadline) {
  FakeChannel to_next, from_prev;  // nobody on the other ends
  FakeLink link(to_next, from_prev, 1);
  std::vector<float> buffer(64, 1.0f);
  RingOptions options = small_chunks(64, 2);
  options.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  std::vector<char> scratch(scratch_bytes(options));
  const RingResult result =
      ring_allreduce(link, 0, 2, buffer.data(), buffer.size(), DType::kF32, scratch.data(), options);
  EXPECT_NE(result.error.find("deadline"), std::string::npos) << result.error;
}

TEST(RingAllReduce, BadArgumentsAreRefused) {
  FakeChannel a, b;
  FakeLink link(a, b, 1);
  float x = 0;
  RingOptions options;
  EXPECT_NE(ring_allreduce(link, 3, 2, &x, 1, DType::kF32, nullptr, options).error, "");
  options.max_inflight = 0;
  EXPECT_NE(ring_allreduce(link, 0, 2, &x, 1, DType::kF32, nullptr, options).error, "");
}

}  // namespace
}  // namespace sieve::bench
