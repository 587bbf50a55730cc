// SPDX-License-Identifier: Apache-2.0
// How the fake reacts to a caller that breaks the verbs contract (a wrong key, a post on a QP that is
// not ready, a CQ overflow...): one line on stderr, then abort() so any test using the fake fails
// loudly, or, with FAKE_VERBS_VIOLATIONS=report, carry on as hardware would (an error completion,
// EINVAL) so tests can check that the transport turns those into errors.
#pragma once

#include <cstdint>

namespace sieve::fake_verbs {

// Prints "fake-verbs: VIOLATION: <what>", counts it, and aborts unless the mode is "report".
// printf-style. Returns only in report mode.
void violation(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Violations so far in this process (the count survives fork into children as it was).
uint64_t violation_count();

}  // namespace sieve::fake_verbs
