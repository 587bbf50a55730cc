// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-impair/impairment.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sieve::impair {

bool parse_probability(const std::string& text, double* out, std::string* error) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  char* end = nullptr;
  errno = 0;
  double value = number.empty() ? NAN : strtod(number.c_str(), &end);
  if (errno != 0 || !end || *end != '\0' || !std::isfinite(value)) {
    *error = "'" + text + "' is not a probability (e.g. 1%, 0.5%, 0.01)";
    return false;
  }
  if (percent) value /= 100;
  if (value < 0 || value > 1) {
    *error = "'" + text + "' is outside 0..100%";
    return false;
  }
  *out = value;
  return true;
}

bool parse_duration_us(const std::string& text, int64_t* out, std::string* error) {
  char* end = nullptr;
  errno = 0;
  const double value = text.empty() ? NAN : strtod(text.c_str(), &end);
  const std::string unit = end ? end : "";
  double scale = 0;
  if (unit == "us") scale = 1;
  else if (unit == "ms" || unit.empty()) scale = 1000;
  else if (unit == "s") scale = 1e6;
  const bool no_number = end == text.c_str();
  if (errno != 0 || no_number || scale == 0 || !std::isfinite(value) || value < 0 || value * scale > 60e6) {
    *error = "'" + text + "' is not a duration from 0 to 60 s (e.g. 5ms, 250us)";
    return false;
  }
  *out = static_cast<int64_t>(std::llround(value * scale));
  return true;
}

std::string validate(const ImpairmentOptions& o) {
  if (o.jitter_us > o.delay_us) return "--jitter must not exceed --delay (a packet cannot leave before it arrived)";
  if (o.reorder > 0 && o.delay_us == 0) return "--reorder needs --delay (reordered packets overtake delayed ones)";
  return "";
}

Impairment::Impairment(const ImpairmentOptions& options) : options_(options), state_(options.seed) {}

double Impairment::uniform() {
  // splitmix64: tiny, seedable, good enough to pick fates.
  uint64_t x = (state_ += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

Decision Impairment::decide(int64_t now_us) {
  Decision d;
  // One draw per question, always in the same order, so a seed fixes the whole schedule.
  const double loss_draw = uniform(), reorder_draw = uniform(), jitter_draw = uniform();
  if (loss_draw < options_.loss) {
    d.fate = Fate::kDrop;
    return d;
  }
  if (options_.delay_us == 0) return d;
  if (reorder_draw < options_.reorder) {
    d.reordered = true;  // as netem: sent at once, ahead of every packet still held
    return d;
  }
  const int64_t spread = options_.jitter_us * 2;
  const int64_t offset = spread > 0 ? static_cast<int64_t>(jitter_draw * static_cast<double>(spread + 1)) : 0;
  d.fate = Fate::kHold;
  d.release_us = now_us + options_.delay_us - options_.jitter_us + offset;
  return d;
}

}  // namespace sieve::impair
