// SPDX-License-Identifier: Apache-2.0
#include "tools/common/json_fields.h"

#include <cstdlib>

namespace sieve::tools::json_fields {

namespace {

bool to_double(const Value& value, double* out) {
  if (value.type != Value::Type::kNumber) return false;
  *out = std::strtod(value.text.c_str(), nullptr);
  return true;
}

}  // namespace

bool whole(const std::string& text, Value* out) {
  Value parsed;
  if (!compress::json::parse(text.data(), text.size(), &parsed).ok()) return false;
  *out = std::move(parsed);
  return true;
}

bool last_object_line(const std::string& text, Value* out) {
  size_t end = text.size();
  while (end > 0) {
    const size_t newline = text.rfind('\n', end - 1);
    const size_t begin = newline == std::string::npos ? 0 : newline + 1;
    const std::string line = text.substr(begin, end - begin);
    Value parsed;
    if (line.find('{') != std::string::npos && whole(line, &parsed) && parsed.type == Value::Type::kObject) {
      *out = std::move(parsed);
      return true;
    }
    if (newline == std::string::npos) break;
    end = newline;
  }
  return false;
}

const Value* find_anywhere(const Value& value, const std::string& key) {
  for (const auto& [name, member] : value.members) {
    if (name == key) return &member;
    if (const Value* inner = find_anywhere(member, key)) return inner;
  }
  for (const Value& item : value.items)
    if (const Value* inner = find_anywhere(item, key)) return inner;
  return nullptr;
}

bool number(const Value& object, const std::string& key, double* out) {
  const Value* member = object.find(key);
  return member != nullptr && to_double(*member, out);
}

double number_or(const Value& object, const std::string& key, double fallback) {
  double value = fallback;
  return number(object, key, &value) ? value : fallback;
}

std::vector<double> numbers(const Value& object, const std::string& key) {
  std::vector<double> values;
  const Value* member = object.find(key);
  if (member == nullptr) return values;
  for (const Value& item : member->items) {
    double value = 0;
    if (to_double(item, &value)) values.push_back(value);
  }
  return values;
}

std::string string(const Value& object, const std::string& key) {
  const Value* member = object.find(key);
  return member != nullptr && member->type == Value::Type::kString ? member->text : "";
}

}  // namespace sieve::tools::json_fields
