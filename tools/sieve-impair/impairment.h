// SPDX-License-Identifier: Apache-2.0
// What netem would do to one packet, decided in user space: drop it, send it now, or send it at a
// later time. Pure logic (no sockets, no clock reads) so the schedule is testable and reproducible
// from a seed; sieve-impair applies the decisions to packets held in an NFQUEUE.
#pragma once

#include <cstdint>
#include <string>

namespace sieve::impair {

struct ImpairmentOptions {
  double loss = 0;        // probability 0..1 that a packet is dropped
  int64_t delay_us = 0;   // base one-way delay added to every kept packet
  int64_t jitter_us = 0;  // delay is uniform in [delay - jitter, delay + jitter] (netem without a table)
  double reorder = 0;     // probability 0..1 that a kept packet skips the delay (goes ahead of held ones)
  uint64_t seed = 1;
};

// Parses "1%", "0.5%" or "0.01" into a probability; false (and *error) on anything else.
bool parse_probability(const std::string& text, double* out, std::string* error);
// Parses "5ms", "250us", "1s" or a bare number of milliseconds into microseconds.
bool parse_duration_us(const std::string& text, int64_t* out, std::string* error);
// Empty when the options are consistent; otherwise why not.
std::string validate(const ImpairmentOptions& options);

enum class Fate { kDrop, kSendNow, kHold };

struct Decision {
  Fate fate = Fate::kSendNow;
  int64_t release_us = 0;  // for Hold: when to send, on the caller's clock
  bool reordered = false;  // sent ahead of its turn (skipped the delay)
};

class Impairment {
 public:
  explicit Impairment(const ImpairmentOptions& options);
  // The fate of the next packet seen at `now_us`.
  Decision decide(int64_t now_us);

 private:
  double uniform();  // [0, 1)
  ImpairmentOptions options_;
  uint64_t state_;
};

}  // namespace sieve::impair
