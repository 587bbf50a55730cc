// SPDX-License-Identifier: Apache-2.0
// A DeviceBackend that does nothing: what is left of a call is the proxy's own host work. For the
// allocation test and the per-call overhead benchmark. It is rank 0 of two whose peer mirrors it:
// its exchanges return its own words (their max), so a commit is agreed.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "plugin/proxy/device_backend.h"

namespace sieve::plugin::proxy::testing {

class NullBackend : public DeviceBackend {
 public:
  struct Layout : DeviceLayout {
    uint64_t span = 0, kept = 0;
    uint64_t count() const override { return span; }
    uint64_t nnz() const override { return kept; }
  };
  struct Buffer : DeviceBuffer {
    explicit Buffer(uint64_t n) : bytes_(n) {}
    void* data() override { return bytes_.data(); }
    uint64_t bytes() const override { return bytes_.size(); }
    std::vector<unsigned char> bytes_;
  };
  struct Words : Exchange {
    explicit Words(uint64_t n) : host_(n), device(n) {}
    void* host() override { return host_.data(); }
    uint64_t bytes() const override { return host_.size(); }
    std::vector<unsigned char> host_, device;
  };

  int all_reduce(const void*, void*, uint64_t, DType, ReduceOp, Comm, Stream) override { return 0; }
  int reduce_scatter(const void*, void*, uint64_t, DType, ReduceOp, Comm, Stream) override { return 0; }
  int all_gather(const void*, void*, uint64_t, DType, Comm, Stream) override { return 0; }
  int group_start() override { return 0; }
  int group_end() override { return 0; }
  int group_simulate_end(void*) override { return 0; }
  int comm_shape(Comm, int* nranks, int* rank) override {
    *nranks = 2;
    *rank = 0;
    return 0;
  }
  int wait_enqueued(Comm, CommLiveness&) override { return 0; }
  int abort_comm(Comm) override { return 0; }
  int capture_status(Stream, bool* capturing) override {
    *capturing = false;
    return 0;
  }
  int create_exchange(uint64_t bytes, std::unique_ptr<Exchange>* out) override {
    *out = std::make_unique<Words>(bytes);
    return 0;
  }
  int exchange_in(Exchange& ex, void* device, uint64_t count, int width, Comm, Stream) override {
    auto& w = static_cast<Words&>(ex);
    std::memcpy(device ? device : w.device.data(), w.host(), count * uint64_t(width));
    return 0;
  }
  int exchange_out(Exchange& ex, const void* device, uint64_t count, int width, Stream) override {
    auto& w = static_cast<Words&>(ex);
    std::memcpy(w.host(), device ? device : w.device.data(), count * uint64_t(width));
    return 0;
  }
  int wait_exchange(Exchange&, Comm, CommLiveness&) override { return 0; }
  int create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                    std::unique_ptr<DeviceLayout>* out) override {
    auto layout = std::make_unique<Layout>();
    layout->span = count;
    for (uint64_t i = 0; i < count; ++i) layout->kept += mask.test(first + i);
    *out = std::move(layout);
    return 0;
  }
  int create_buffer(uint64_t bytes, std::unique_ptr<DeviceBuffer>* out) override {
    *out = std::make_unique<Buffer>(bytes);
    return 0;
  }
  int gather(const DeviceLayout&, size_t, const void*, void*, Stream) override { return 0; }
  int scatter(const DeviceLayout&, size_t, const void*, void*, Stream) override { return 0; }
  int check(const DeviceLayout&, size_t, const void*, void*, const FlagEncoding&, DeviceBuffer&, Stream) override {
    return 0;
  }
  struct Counter : ViolationCounter {
    uint64_t seen() const override { return 0; }
  };
  int create_counter(std::unique_ptr<ViolationCounter>* out) override {
    *out = std::make_unique<Counter>();
    return 0;
  }
  int count_pruned(const DeviceLayout&, size_t, const void*, ViolationCounter&, bool, Stream) override { return 0; }
  int download(const void*, void*, uint64_t, Stream, Comm, CommLiveness&) override { return 0; }
  int create_slot(uint64_t, std::unique_ptr<LagSlot>* out) override {
    *out = std::make_unique<LagSlot>();
    return 0;
  }
  int record_nonzero(LagSlot&, const void*, uint64_t, DType, Stream) override { return 0; }
  int record_flag(LagSlot&, const void*, size_t, DeviceBuffer&, Stream) override { return 0; }
  int read_nonzero(LagSlot&, Comm, CommLiveness&, uint64_t count, compress::Mask* nonzero) override {
    // A stable pattern: the first quarter nonzero (in the mask's own storage, as the CUDA backend).
    std::vector<uint8_t>& bits = pattern_;
    if (bits.size() != (count + 7) / 8) {
      bits.assign((count + 7) / 8, 0);
      for (uint64_t i = 0; i < count / 4; ++i) bits[i / 8] |= uint8_t(1u << (i % 8));
    }
    nonzero->assign_bitmap(bits.data(), count);
    return 0;
  }
  std::vector<uint8_t> pattern_;
  int read_flag(LagSlot&, Comm, CommLiveness&, uint64_t* flag_bits, uint64_t* local_violations) override {
    *flag_bits = 0;
    *local_violations = 0;
    return 0;
  }
};

}  // namespace sieve::plugin::proxy::testing
