// SPDX-License-Identifier: Apache-2.0
// A small strict JSON reader for file headers (safetensors). RFC 8259 grammar, nesting bounded,
// duplicate object keys refused, numbers kept as text so 64-bit integers survive exactly. Errors
// name the byte offset. Not a general-purpose library: it reads headers of at most a few MB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compress/status.h"

namespace sieve::compress::json {

struct Value {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;                                    // kString: the decoded string; kNumber: the number as written
  std::vector<Value> items;                            // kArray
  std::vector<std::pair<std::string, Value>> members;  // kObject, in file order

  // kNumber holding a non-negative integer that fits 64 bits.
  bool as_uint64(uint64_t* out) const;
  const Value* find(const std::string& key) const;
};

const char* type_name(Value::Type type);

constexpr int kMaxDepth = 64;

// Parses exactly one value spanning text[0, size) (surrounding whitespace allowed).
Status parse(const char* text, size_t size, Value* out);

// Parses one object spanning text[0, size) member by member: each member's value, of at most
// `max_values` values (itself and everything inside it), is built, handed to `each` and dropped, so
// reading a large document costs the memory of its largest member, not a tree of the whole (about
// 70 times the text's size). Stops at the first error, `each`'s included.
using MemberFn = std::function<Status(const std::string& key, Value& value)>;
Status parse_object_members(const char* text, size_t size, size_t max_values, const MemberFn& each);

// The writing side, shared by every JSON the project emits (telemetry, sieve-info, sieve-bench):
// `text` escaped for a JSON string (quotes, backslash, control characters; UTF-8 passes through)...
std::string escape(const std::string& text);
// ... and the same between double quotes.
inline std::string quote(const std::string& text) { return "\"" + escape(text) + "\""; }

}  // namespace sieve::compress::json
