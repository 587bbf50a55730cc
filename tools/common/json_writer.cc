// SPDX-License-Identifier: Apache-2.0
#include "tools/common/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "compress/json.h"

namespace sieve::tools {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ << ',';
    first_.back() = false;
  }
}

void JsonWriter::open(char bracket) {
  separate();
  out_ << bracket;
  first_.push_back(true);
}

void JsonWriter::close(char bracket) {
  first_.pop_back();
  out_ << bracket;
}

void JsonWriter::key(const std::string& name) {
  separate();
  out_ << compress::json::quote(name) << ':';
  after_key_ = true;
}

void JsonWriter::value(const std::string& text) {
  separate();
  out_ << compress::json::quote(text);
}

void JsonWriter::value(int64_t number) {
  separate();
  out_ << number;
}

void JsonWriter::value(uint64_t number) {
  separate();
  out_ << number;
}

void JsonWriter::value(double number) {
  separate();
  if (!std::isfinite(number)) {
    out_ << "null";  // JSON has no NaN or infinity
    return;
  }
  char text[40];
  if (number == std::trunc(number) && std::fabs(number) <= 9007199254740992.0) {
    std::snprintf(text, sizeof(text), "%.0f", number);
  } else {
    // The shortest of %.15g..%.17g that parses back to the same double.
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(text, sizeof(text), "%.*g", digits, number);
      if (std::strtod(text, nullptr) == number) break;
    }
  }
  out_ << text;
}

void JsonWriter::value(bool flag) {
  separate();
  out_ << (flag ? "true" : "false");
}

void JsonWriter::null() {
  separate();
  out_ << "null";
}

void JsonWriter::member_strings(const std::string& name, const std::vector<std::string>& items) {
  key(name);
  begin_array();
  for (const auto& item : items) value(item);
  end_array();
}

}  // namespace sieve::tools
