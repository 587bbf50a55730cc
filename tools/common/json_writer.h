// SPDX-License-Identifier: Apache-2.0
// The one JSON writer of the tools (sieve-info, sieve-bench, sieve-perf): objects, arrays, strings
// (escaped per RFC 8259), numbers, bools. It places commas itself, so callers write members in order
// and cannot produce broken JSON. Numbers are written so a reader gets them back exactly and a person
// can read them: integers (byte counts, even when computed as doubles) as integers, never 5.19406e+08.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace sieve::tools {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  // Member name inside an object; the next value call writes its value.
  void key(const std::string& name);

  void value(const std::string& text);
  void value(const char* text) { value(std::string(text != nullptr ? text : "")); }
  void value(int64_t number);
  void value(uint64_t number);
  void value(int number) { value(static_cast<int64_t>(number)); }
  // Integral values up to 2^53 as integers; others in the fewest digits that read back exactly
  // (at most 17); NaN and infinity, which JSON lacks, as null.
  void value(double number);
  void value(bool flag);
  void null();

  template <typename T> void member(const std::string& name, const T& v) {
    key(name);
    value(v);
  }
  void member_strings(const std::string& name, const std::vector<std::string>& items);

 private:
  void open(char bracket);
  void close(char bracket);
  void separate();

  std::ostream& out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

// One object on a line of its own: write_members(JsonWriter&) writes its members. The records a log
// carries one per line (the GPU kit's programs).
template <typename Members> std::string json_line(Members&& write_members) {
  std::ostringstream out;
  JsonWriter json(out);
  json.begin_object();
  write_members(json);
  json.end_object();
  out << '\n';
  return out.str();
}

// A measurement to the precision it has (a time to 0.1 us, a ratio to 0.001): value(double) writes
// every digit a double holds, and the ones past the measurement's precision are noise to a reader.
inline double rounded(double number, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(number * scale) / scale;
}

}  // namespace sieve::tools
