// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/ring_allreduce.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sieve::bench {

namespace {

struct Message {
  int step;
  size_t first;  // element offset in the buffer
  size_t count;
};

// Slices of a buffer, NCCL-style: equal-sized except the tail, which may be short or empty.
struct Slicing {
  size_t count;
  size_t slice;
  int nranks;
  size_t begin(int index) const { return std::min(count, slice * static_cast<size_t>(index)); }
  size_t end(int index) const { return std::min(count, begin(index) + slice); }
};

int mod(int value, int n) { return ((value % n) + n) % n; }

// What a ring collective does step by step: how many steps, how many of the first ones reduce
// what they receive (the rest copy it), and which slice a rank sends at step 0.
struct RingShape {
  int steps;
  int reducing_steps;
  int first_slice;  // relative to the rank: 0 = its own
};

RingShape all_reduce_shape(int n) { return {2 * (n - 1), n - 1, 0}; }
// Each rank starts with the slice before its own, so its own arrives last, reduced by every rank.
RingShape reduce_scatter_shape(int n) { return {n - 1, n - 1, -1}; }
RingShape all_gather_shape(int n) { return {n - 1, 0, 0}; }

// The messages of one direction of the ring, in wire order. At step s a node sends slice
// (rank + first - s) and receives slice (rank + first - s - 1); both ends cut a slice into the
// same chunks.
std::vector<Message> schedule(const Slicing& slicing, const RingShape& shape, int rank, bool receiving,
                              size_t chunk_elems) {
  std::vector<Message> messages;
  for (int step = 0; step < shape.steps; ++step) {
    const int index = mod(rank + shape.first_slice - step - (receiving ? 1 : 0), slicing.nranks);
    for (size_t first = slicing.begin(index); first < slicing.end(index); first += chunk_elems) {
      messages.push_back({step, first, std::min(chunk_elems, slicing.end(index) - first)});
    }
  }
  return messages;
}

struct InFlight {
  size_t message;
  void* request;
  int slot;  // scratch slot of a reduce-scatter receive, -1 otherwise
};

class RingRun {
 public:
  RingRun(RingLink& link, const RingShape& shape, int rank, int nranks, void* buffer, size_t count, DType type,
          void* scratch, const RingOptions& options, std::string name)
      : link_(link),
        name_(std::move(name)),
        nranks_(nranks),
        reducing_steps_(shape.reducing_steps),
        type_(type),
        elem_(dtype_size(type)),
        buffer_(static_cast<char*>(buffer)),
        scratch_(static_cast<char*>(scratch)),
        options_(options) {
    const size_t chunk_elems = std::max<size_t>(1, options.chunk_bytes / elem_);
    const Slicing slicing{count, (count + nranks - 1) / nranks, nranks};
    sends_ = schedule(slicing, shape, rank, false, chunk_elems);
    recvs_ = schedule(slicing, shape, rank, true, chunk_elems);
    // Both lists walk the same slice in consecutive steps with the same chunking, so send k of step
    // s>0 carries what receive k of step s-1 delivered; a copying receive at step s overwrites the
    // chunk this rank sent at step s+1-N, if it sent one (all-reduce's second half). Index both
    // dependencies once.
    send_waits_for_recv_.assign(sends_.size(), -1);
    recv_waits_for_send_.assign(recvs_.size(), -1);
    for (size_t i = 0, j = 0; i < sends_.size(); ++i) {
      if (sends_[i].step == 0) continue;
      while (j < recvs_.size() && !(recvs_[j].step == sends_[i].step - 1 && recvs_[j].first == sends_[i].first)) ++j;
      send_waits_for_recv_[i] = static_cast<long>(j);
    }
    for (size_t j = 0, i = 0; j < recvs_.size(); ++j) {
      const int send_step = recvs_[j].step + 1 - nranks_;
      if (recvs_[j].step < reducing_steps_ || send_step < 0) continue;
      while (i < sends_.size() && !(sends_[i].step == send_step && sends_[i].first == recvs_[j].first)) ++i;
      recv_waits_for_send_[j] = static_cast<long>(i);
    }
    send_done_.assign(sends_.size(), false);
    recv_done_.assign(recvs_.size(), false);
    for (int slot = options.max_inflight - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  }

  RingResult run() {
    RingResult result;
    int idle = 0;
    while (sends_completed_ < sends_.size() || recvs_completed_ < recvs_.size()) {
      if (std::chrono::steady_clock::now() > options_.deadline) {
        result.error = name_ + ": deadline passed with " + std::to_string(sends_.size() - sends_completed_) +
                       " sends and " + std::to_string(recvs_.size() - recvs_completed_) + " receives pending";
        return result;
      }
      bool progress = false;
      std::string error = post_recvs(progress);
      if (error.empty()) error = post_sends(progress, result.bytes_sent);
      if (error.empty()) error = poll(recv_flight_, true, progress);
      if (error.empty()) error = poll(send_flight_, false, progress);
      if (!error.empty()) {
        result.error = name_ + ": " + error;
        return result;
      }
      // The nodes share CPUs with the transport's helper threads: do not spin them out.
      if (progress) {
        idle = 0;
      } else if (++idle > 32) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::this_thread::yield();
      }
    }
    return result;
  }

 private:
  std::string post_recvs(bool& progress) {
    while (recvs_posted_ < recvs_.size() && recv_flight_.size() < static_cast<size_t>(options_.max_inflight)) {
      const Message& m = recvs_[recvs_posted_];
      const bool reduce = m.step < reducing_steps_;
      const long after_send = recv_waits_for_send_[recvs_posted_];
      if (after_send >= 0 && !send_done_[after_send]) break;
      if (reduce && free_slots_.empty()) break;
      const int slot = reduce ? free_slots_.back() : -1;
      void* target = reduce ? scratch_ + static_cast<size_t>(slot) * options_.chunk_bytes : buffer_ + m.first * elem_;
      void* request = nullptr;
      std::string error = link_.post_recv(target, m.count * elem_, &request);
      if (!error.empty()) return error;
      if (request == nullptr) break;
      if (reduce) free_slots_.pop_back();
      recv_flight_.push_back({recvs_posted_++, request, slot});
      progress = true;
    }
    return "";
  }

  std::string post_sends(bool& progress, size_t& bytes_sent) {
    while (sends_posted_ < sends_.size() && send_flight_.size() < static_cast<size_t>(options_.max_inflight)) {
      const Message& m = sends_[sends_posted_];
      const long after_recv = send_waits_for_recv_[sends_posted_];
      if (after_recv >= 0 && !recv_done_[after_recv]) break;
      void* request = nullptr;
      std::string error = link_.post_send(buffer_ + m.first * elem_, m.count * elem_, &request);
      if (!error.empty()) return error;
      if (request == nullptr) break;
      bytes_sent += m.count * elem_;
      send_flight_.push_back({sends_posted_++, request, -1});
      progress = true;
    }
    return "";
  }

  std::string poll(std::vector<InFlight>& flight, bool receiving, bool& progress) {
    for (size_t i = 0; i < flight.size();) {
      bool done = false;
      size_t bytes = 0;
      std::string error = link_.test(flight[i].request, &done, &bytes);
      if (!error.empty()) return error;
      if (!done) {
        ++i;
        continue;
      }
      const Message& m = receiving ? recvs_[flight[i].message] : sends_[flight[i].message];
      if (receiving) {
        if (bytes != m.count * elem_) {
          return "step " + std::to_string(m.step) + " received " + std::to_string(bytes) + " bytes, expected " +
                 std::to_string(m.count * elem_);
        }
        if (flight[i].slot >= 0) {
          sum_into(type_, buffer_ + m.first * elem_,
                   scratch_ + static_cast<size_t>(flight[i].slot) * options_.chunk_bytes, m.count);
          free_slots_.push_back(flight[i].slot);
        }
        recv_done_[flight[i].message] = true;
        ++recvs_completed_;
      } else {
        send_done_[flight[i].message] = true;
        ++sends_completed_;
      }
      flight.erase(flight.begin() + static_cast<long>(i));
      progress = true;
    }
    return "";
  }

  RingLink& link_;
  std::string name_;  // "ring all-reduce": how errors begin
  int nranks_;
  int reducing_steps_;
  DType type_;
  size_t elem_;
  char* buffer_;
  char* scratch_;
  RingOptions options_;
  std::vector<Message> sends_, recvs_;
  std::vector<long> send_waits_for_recv_, recv_waits_for_send_;
  std::vector<bool> send_done_, recv_done_;
  std::vector<int> free_slots_;
  std::vector<InFlight> send_flight_, recv_flight_;
  size_t sends_posted_ = 0, recvs_posted_ = 0, sends_completed_ = 0, recvs_completed_ = 0;
};

RingResult run_ring(const char* collective, RingShape (*shape_of)(int), bool sharded, RingLink& link, int rank,
                    int nranks, void* buffer, size_t count, DType type, void* scratch, const RingOptions& options) {
  const std::string name = std::string("ring ") + collective;
  if (nranks < 1 || rank < 0 || rank >= nranks) return {name + ": bad rank " + std::to_string(rank), 0};
  if (options.max_inflight < 1 || options.chunk_bytes < dtype_size(type)) {
    return {name + ": chunk size and in-flight count must be positive", 0};
  }
  if (sharded && count % static_cast<size_t>(nranks) != 0) {
    return {
        name + ": " + std::to_string(count) + " elements do not split into " + std::to_string(nranks) + " equal shards",
        0};
  }
  if (nranks == 1 || count == 0) return {};
  return RingRun(link, shape_of(nranks), rank, nranks, buffer, count, type, scratch, options, name).run();
}

}  // namespace

RingResult ring_allreduce(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type, void* scratch,
                          const RingOptions& options) {
  return run_ring("all-reduce", all_reduce_shape, false, link, rank, nranks, buffer, count, type, scratch, options);
}

RingResult ring_reduce_scatter(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type,
                               void* scratch, const RingOptions& options) {
  return run_ring("reduce-scatter", reduce_scatter_shape, true, link, rank, nranks, buffer, count, type, scratch,
                  options);
}

RingResult ring_all_gather(RingLink& link, int rank, int nranks, void* buffer, size_t count, DType type,
                           const RingOptions& options) {
  return run_ring("all-gather", all_gather_shape, true, link, rank, nranks, buffer, count, type, nullptr, options);
}

}  // namespace sieve::bench
