// SPDX-License-Identifier: Apache-2.0
#include "tests/plugin/net/conformance/peer_streams.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <deque>

#include "tests/plugin/net/conformance/pattern.h"

namespace sieve::conformance {
namespace {

constexpr size_t kGuard = 64;  // bytes past the posted size that must stay untouched

struct Slot {
  std::vector<unsigned char> buffer;
  void* mhandle = nullptr;
};

struct InFlight {
  void* request = nullptr;
  int slot = 0;
  uint64_t index = 0;
  size_t size = 0;    // bytes sent
  size_t posted = 0;  // receive capacity
};

void pause_briefly() {
  timespec pause{0, 20 * 1000};
  nanosleep(&pause, nullptr);
}

std::string describe(const char* what, int result) {
  return std::string(what) + " returned " + tools::result_name(result);
}

// Registers one buffer per slot, deregisters on scope exit, as NCCL does around a connection's life.
class Slots {
 public:
  Slots(const StreamEnd& end, int count, size_t capacity) : end_(end), slots_(count) {
    for (auto& slot : slots_) {
      slot.buffer.assign(capacity + kGuard, kCanary);
      const int result =
          end.net->reg_mr(end.comm, slot.buffer.data(), slot.buffer.size(), tools::kPtrHost, &slot.mhandle);
      if (result != tools::kNetSuccess && error_.empty()) error_ = describe("regMr", result);
    }
  }
  ~Slots() {
    for (auto& slot : slots_) {
      if (slot.mhandle) end_.net->dereg_mr(end_.comm, slot.mhandle);
    }
  }
  Slot& operator[](int i) { return slots_[i]; }
  const std::string& error() const { return error_; }

 private:
  const StreamEnd& end_;
  std::vector<Slot> slots_;
  std::string error_;
};

// Posts one request, retrying while the plugin answers NULL (allowed), bounded by the stall time.
int post(const StreamEnd& end, Slot& slot, InFlight& op) {
  const int tag = static_cast<int>(op.index & 0x7fff);
  if (end.sender) {
    return tools::isend_until(*end.net, end.comm, slot.buffer.data(), op.size, tag, slot.mhandle, &op.request,
                              end.stall_ms);
  }
  return tools::irecv_until(*end.net, end.comm, slot.buffer.data(), op.posted, tag, slot.mhandle, &op.request,
                            end.stall_ms);
}

std::string check_received(const Slot& slot, const InFlight& op, int reported, uint64_t seed, bool sparse) {
  char text[256];
  if (reported < 0 || static_cast<size_t>(reported) != op.size) {
    snprintf(text, sizeof text, "message %llu: test reported %d bytes, %zu were sent (posted %zu)",
             static_cast<unsigned long long>(op.index), reported, op.size, op.posted);
    return text;
  }
  const size_t bad = sparse ? first_sparse_mismatch(slot.buffer.data(), op.size, seed, op.index)
                            : first_mismatch(slot.buffer.data(), op.size, seed, op.index);
  if (bad != op.size) {
    snprintf(text, sizeof text, "message %llu (%zu bytes): first wrong byte at offset %zu",
             static_cast<unsigned long long>(op.index), op.size, bad);
    return text;
  }
  const size_t end = op.posted + kGuard;
  for (size_t i = op.size; i < end; ++i) {
    if (slot.buffer[i] != kCanary) {
      snprintf(text, sizeof text, "message %llu (%zu bytes, posted %zu): byte %zu past the message was written",
               static_cast<unsigned long long>(op.index), op.size, op.posted, i);
      return text;
    }
  }
  return "";
}

}  // namespace

StreamResult run_stream(const StreamEnd& end, const std::vector<size_t>& sizes, int window, uint64_t first_index,
                        bool verify) {
  StreamResult result;
  window = std::max(1, std::min(window, tools::kMaxRequests));
  size_t capacity = 0;
  for (size_t i = 0; i < sizes.size(); ++i) capacity = std::max(capacity, posted_size(sizes[i], first_index + i));
  Slots slots(end, window, std::max<size_t>(capacity, 1));
  if (!slots.error().empty()) return {false, slots.error(), 0, 0, 0};

  std::deque<InFlight> in_flight;
  std::vector<int> free_slots;
  for (int i = window - 1; i >= 0; --i) free_slots.push_back(i);
  size_t next = 0;
  int64_t last_progress = tools::monotonic_ms();
  auto fail = [&](const std::string& why, int plugin_result) {
    result.ok = false;
    result.error = why;
    result.plugin_result = plugin_result;
    return result;
  };

  while (next < sizes.size() || !in_flight.empty()) {
    while (next < sizes.size() && !free_slots.empty()) {
      InFlight op;
      op.slot = free_slots.back();
      op.index = first_index + next;
      op.size = sizes[next];
      op.posted = posted_size(op.size, op.index);
      Slot& slot = slots[op.slot];
      if (end.sender && verify) {
        if (end.sparse) fill_sparse_pattern(slot.buffer.data(), op.size, end.seed, op.index);
        else fill_pattern(slot.buffer.data(), op.size, end.seed, op.index);
      }
      if (!end.sender && verify) std::fill(slot.buffer.begin(), slot.buffer.end(), kCanary);
      const int posted = post(end, slot, op);
      if (posted != tools::kNetSuccess) return fail(describe(end.sender ? "isend" : "irecv", posted), posted);
      free_slots.pop_back();
      in_flight.push_back(op);
      ++next;
    }
    InFlight& oldest = in_flight.front();
    int done = 0, reported = -1;
    const int tested = end.net->test(oldest.request, &done, &reported);
    if (tested != tools::kNetSuccess) return fail(describe("test", tested), tested);
    const int64_t now = tools::monotonic_ms();
    if (!done) {
      if (now - last_progress > end.stall_ms) {
        return fail("no request completed for " + std::to_string(end.stall_ms) + " ms (message " +
                        std::to_string(oldest.index) + ")",
                    0);
      }
      pause_briefly();
      continue;
    }
    last_progress = now;
    if (end.sender && static_cast<size_t>(reported) != oldest.size) {
      return fail("send of " + std::to_string(oldest.size) + " bytes reported " + std::to_string(reported), 0);
    }
    if (!end.sender && verify) {
      const std::string bad = check_received(slots[oldest.slot], oldest, reported, end.seed, end.sparse);
      if (!bad.empty()) return fail(bad, 0);
    }
    result.messages += 1;
    result.bytes += oldest.size;
    free_slots.push_back(oldest.slot);
    in_flight.pop_front();
  }
  return result;
}

StreamResult run_until_error(const StreamEnd& end, size_t size, int window, void (*say)(const char* fmt, ...)) {
  StreamResult result;
  Slots slots(end, window, size + size / 2 + 13);
  if (!slots.error().empty()) return {false, slots.error(), 0, 0, 0};
  std::deque<InFlight> in_flight;
  uint64_t index = 0;
  int64_t last_progress = tools::monotonic_ms();
  auto report_error = [&](const char* what, int plugin_result) {
    say("ERROR %lld %s %s", static_cast<long long>(tools::monotonic_ms()), what, tools::result_name(plugin_result));
    result.plugin_result = plugin_result;
    result.error = describe(what, plugin_result);
    return result;  // an error is the expected end of this stream
  };
  while (true) {
    while (static_cast<int>(in_flight.size()) < window) {
      InFlight op;
      op.slot = static_cast<int>(index % window);
      op.index = index++;
      op.size = size;
      op.posted = posted_size(size, op.index);
      const int posted = post(end, slots[op.slot], op);
      if (posted != tools::kNetSuccess) return report_error(end.sender ? "isend" : "irecv", posted);
      in_flight.push_back(op);
    }
    int done = 0, reported = 0;
    const int tested = end.net->test(in_flight.front().request, &done, &reported);
    if (tested != tools::kNetSuccess) return report_error("test", tested);
    if (done) {
      if (result.messages++ == 0) say("PROGRESS");
      result.bytes += size;
      last_progress = tools::monotonic_ms();
      in_flight.pop_front();
    } else if (tools::monotonic_ms() - last_progress > end.stall_ms) {
      say("STALLED %lld", static_cast<long long>(tools::monotonic_ms()));
      result.ok = false;
      result.error = "no completion and no error for " + std::to_string(end.stall_ms) + " ms";
      return result;
    } else {
      pause_briefly();
    }
  }
}

}  // namespace sieve::conformance
