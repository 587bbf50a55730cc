// SPDX-License-Identifier: Apache-2.0
#include "net/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace sieve::net {

TokenBucket::TokenBucket(double bytes_per_second, double burst_bytes, Clock::time_point now)
    : rate_(std::max(1.0, bytes_per_second)), burst_(std::max(1.0, burst_bytes)), tokens_(burst_), last_(now) {}

void TokenBucket::refill(Clock::time_point now) {
  if (now <= last_) return;
  double seconds = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + seconds * rate_);
  last_ = now;
}

double TokenBucket::tokens(Clock::time_point now) {
  refill(now);
  return tokens_;
}

TokenBucket::Grant TokenBucket::take(size_t want, size_t min_grant, Clock::time_point now) {
  refill(now);
  Grant g;
  if (want == 0) return g;
  // A grant larger than the burst could never be covered: cap the floor there.
  const double floor = std::min<double>({static_cast<double>(want), static_cast<double>(min_grant), burst_});
  if (tokens_ >= floor && tokens_ >= 1.0) {
    g.bytes = static_cast<size_t>(std::min<double>(static_cast<double>(want), tokens_));
    tokens_ -= static_cast<double>(g.bytes);
    return g;
  }
  double missing = std::max(1.0, floor) - tokens_;
  g.wait = std::chrono::nanoseconds(static_cast<int64_t>(missing / rate_ * 1e9) + 1);
  return g;
}

void TokenBucket::charge(size_t bytes, Clock::time_point now) {
  refill(now);
  tokens_ -= static_cast<double>(bytes);
}

void TokenBucket::refund(size_t bytes) { tokens_ = std::min(burst_, tokens_ + static_cast<double>(bytes)); }

RateLimiter::RateLimiter(int64_t mbps, size_t burst_bytes)
    : mbps_(mbps),
      bucket_(static_cast<double>(mbps) * 1e6 / 8.0, static_cast<double>(burst_bytes), TokenBucket::Clock::now()) {}

size_t RateLimiter::acquire(size_t want, size_t min_grant, std::chrono::milliseconds max_wait) {
  TokenBucket::Grant g;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    g = bucket_.take(want, min_grant, TokenBucket::Clock::now());
  }
  if (g.bytes == 0) std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(g.wait, max_wait));
  return g.bytes;
}

void RateLimiter::charge(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bucket_.charge(bytes, TokenBucket::Clock::now());
}

void RateLimiter::refund(size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  bucket_.refund(bytes);
}

}  // namespace sieve::net
