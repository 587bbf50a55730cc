// SPDX-License-Identifier: Apache-2.0
// SIEVE_RATE_LIMIT_MBPS: a token bucket per device, shared by every connection of that device in
// the process, so a slow link can be emulated where tc is not allowed. Only helper threads wait on
// it (the caller's thread never sleeps); inline messages on the control socket are charged without
// waiting, so they delay the next stripes instead.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace sieve::net {

// The bucket's arithmetic, with the clock passed in so it can be checked without waiting.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  // rate in bytes per second (> 0); burst: the most bytes that may go out back to back.
  TokenBucket(double bytes_per_second, double burst_bytes, Clock::time_point now);

  struct Grant {
    size_t bytes = 0;                  // may be sent now
    std::chrono::nanoseconds wait{0};  // when bytes == 0: how long until enough tokens
  };
  // Grants up to `want` bytes, and never fewer than min(want, min_grant) (no tiny writes).
  Grant take(size_t want, size_t min_grant, Clock::time_point now);
  // Spends tokens without waiting (may go into debt that later takers wait out).
  void charge(size_t bytes, Clock::time_point now);
  // Returns granted bytes that were not sent after all.
  void refund(size_t bytes);
  double tokens(Clock::time_point now);

 private:
  void refill(Clock::time_point now);
  const double rate_;
  const double burst_;
  double tokens_;
  Clock::time_point last_;
};

// Thread-safe bucket on the real clock.
class RateLimiter {
 public:
  RateLimiter(int64_t mbps, size_t burst_bytes);
  // Blocks the calling helper thread at most `max_wait`; returns the bytes it may send now (0: try again).
  size_t acquire(size_t want, size_t min_grant, std::chrono::milliseconds max_wait);
  void charge(size_t bytes);
  void refund(size_t bytes);
  int64_t mbps() const { return mbps_; }

 private:
  const int64_t mbps_;
  std::mutex mutex_;
  TokenBucket bucket_;
};

}  // namespace sieve::net
