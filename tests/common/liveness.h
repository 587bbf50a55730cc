// SPDX-License-Identifier: Apache-2.0
// Liveness bounds. A test may assert time only for a liveness contract of the product: "an abort
// returns within a second", "a dead peer is an error within seconds". Such a bound is generous
// (many times what the call takes on a loaded 2-core machine) and is scaled here where a sanitizer
// slows every instruction; the test executable carries the ctest label `liveness` (CONTRIBUTING.md).
// Speed itself is never asserted: it goes into benchmarks that print ratios.
#pragma once

#include <chrono>

namespace sieve::liveness {

#if defined(__SANITIZE_THREAD__)
inline constexpr int kScale = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kScale = 3;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr int kScale = 10;
#elif __has_feature(address_sanitizer)
inline constexpr int kScale = 3;
#else
inline constexpr int kScale = 1;
#endif
#else
inline constexpr int kScale = 1;
#endif

// The bound a liveness assertion uses for a contract of `nominal`.
template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> bound(std::chrono::duration<Rep, Period> nominal) {
  return nominal * kScale;
}

}  // namespace sieve::liveness
