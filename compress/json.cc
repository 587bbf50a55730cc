// SPDX-License-Identifier: Apache-2.0
#include "compress/json.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace sieve::compress::json {
namespace {

class Parser {
 public:
  Parser(const char* text, size_t size, size_t max_values = SIZE_MAX)
      : p_(text), size_(size), max_values_(max_values) {}

  Status parse_document(Value* out) {
    skip_space();
    Status s = parse_value(out, 0);
    if (!s.ok()) return s;
    skip_space();
    if (at_ < size_) return fail("unexpected text after the JSON value");
    return s;
  }

  // One object, member by member: each value is built under a fresh budget, handed over, dropped.
  Status parse_members(const MemberFn& each) {
    skip_space();
    if (at_ >= size_ || p_[at_] != '{') return fail("expected an object");
    Status s = walk_object([&](std::string key) {
      values_left_ = max_values_;
      Value value;
      Status parsed = parse_value(&value, 1);
      return parsed.ok() ? each(key, value) : parsed;
    });
    if (!s.ok()) return s;
    skip_space();
    if (at_ < size_) return fail("unexpected text after the JSON value");
    return ok_status();
  }

 private:
  Status fail(const std::string& what) const {
    return error(Code::kMalformed, "bad JSON at offset " + std::to_string(at_) + ": " + what);
  }
  void skip_space() {
    while (at_ < size_ && (p_[at_] == ' ' || p_[at_] == '\t' || p_[at_] == '\n' || p_[at_] == '\r')) ++at_;
  }
  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (size_ - at_ < n || std::memcmp(p_ + at_, word, n) != 0) return false;
    at_ += n;
    return true;
  }

  Status parse_value(Value* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (values_left_ == 0) return fail("more than " + std::to_string(max_values_) + " values in one member");
    --values_left_;
    if (at_ >= size_) return fail("unexpected end of text");
    const char c = p_[at_];
    if (c == '{') return parse_object(out, depth);
    if (c == '[') return parse_array(out, depth);
    if (c == '"') {
      out->type = Value::Type::kString;
      return parse_string(&out->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
    if (literal("true")) {
      out->type = Value::Type::kBool;
      out->boolean = true;
      return ok_status();
    }
    if (literal("false")) {
      out->type = Value::Type::kBool;
      return ok_status();
    }
    if (literal("null")) {
      out->type = Value::Type::kNull;
      return ok_status();
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  Status parse_object(Value* out, int depth) {
    out->type = Value::Type::kObject;
    return walk_object([&](std::string key) {
      out->members.emplace_back(std::move(key), Value());
      return parse_value(&out->members.back().second, depth + 1);
    });
  }

  // The one loop over an object's members (at_ on its '{'): keys are strings, each once; for each,
  // member(key) parses the value that follows the ':'. A whole tree (parse_object) and a member at a
  // time (parse_members) differ only in what member() keeps.
  template <class Member> Status walk_object(Member&& member) {
    ++at_;  // '{'
    skip_space();
    if (at_ < size_ && p_[at_] == '}') {
      ++at_;
      return ok_status();
    }
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_space();
      if (at_ >= size_ || p_[at_] != '"') return fail("expected a string key");
      std::string key;
      Status s = parse_string(&key);
      if (!s.ok()) return s;
      if (!seen.insert(key).second) return fail("duplicate key \"" + key + "\"");
      skip_space();
      if (at_ >= size_ || p_[at_] != ':') return fail("expected ':' after a key");
      ++at_;
      skip_space();
      s = member(std::move(key));
      if (!s.ok()) return s;
      skip_space();
      if (at_ < size_ && p_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < size_ && p_[at_] == '}') {
        ++at_;
        return ok_status();
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  Status parse_array(Value* out, int depth) {
    out->type = Value::Type::kArray;
    ++at_;  // '['
    skip_space();
    if (at_ < size_ && p_[at_] == ']') {
      ++at_;
      return ok_status();
    }
    for (;;) {
      skip_space();
      out->items.emplace_back();
      Status s = parse_value(&out->items.back(), depth + 1);
      if (!s.ok()) return s;
      skip_space();
      if (at_ < size_ && p_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < size_ && p_[at_] == ']') {
        ++at_;
        return ok_status();
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  Status parse_number(Value* out) {
    const size_t begin = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < size_ && p_[at_] >= '0' && p_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (p_[at_] == '-') ++at_;
    if (at_ < size_ && p_[at_] == '0') {
      ++at_;
    } else if (digits() == 0) {
      return fail("malformed number");
    }
    if (at_ < size_ && p_[at_] == '.') {
      ++at_;
      if (digits() == 0) return fail("malformed number: digits expected after '.'");
    }
    if (at_ < size_ && (p_[at_] == 'e' || p_[at_] == 'E')) {
      ++at_;
      if (at_ < size_ && (p_[at_] == '+' || p_[at_] == '-')) ++at_;
      if (digits() == 0) return fail("malformed number: digits expected in the exponent");
    }
    out->type = Value::Type::kNumber;
    out->text.assign(p_ + begin, at_ - begin);
    return ok_status();
  }

  int hex4(size_t at) const {
    if (size_ - at < 4) return -1;
    int v = 0;
    for (size_t i = at; i < at + 4; ++i) {
      const char c = p_[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  static void append_utf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
      s->push_back(char(cp));
    } else if (cp < 0x800) {
      s->push_back(char(0xC0 | (cp >> 6)));
      s->push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(char(0xE0 | (cp >> 12)));
      s->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(char(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(char(0xF0 | (cp >> 18)));
      s->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(char(0x80 | (cp & 0x3F)));
    }
  }

  Status parse_string(std::string* out) {
    ++at_;  // '"'
    for (;;) {
      if (at_ >= size_) return fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(p_[at_]);
      if (c == '"') {
        ++at_;
        return ok_status();
      }
      if (c < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out->push_back(char(c));
        ++at_;
        continue;
      }
      if (++at_ >= size_) return fail("unterminated escape");
      const char e = p_[at_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          int cp = hex4(at_);
          if (cp < 0) return fail("bad \\u escape");
          at_ += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair must follow
            if (size_ - at_ < 6 || p_[at_] != '\\' || p_[at_ + 1] != 'u') return fail("unpaired surrogate");
            const int low = hex4(at_ + 2);
            if (low < 0xDC00 || low > 0xDFFF) return fail("unpaired surrogate");
            at_ += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail("unpaired surrogate");
          }
          append_utf8(out, uint32_t(cp));
          break;
        }
        default: return fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  const char* p_;
  size_t size_;
  size_t at_ = 0;
  size_t max_values_;
  size_t values_left_ = SIZE_MAX;
};

}  // namespace

bool Value::as_uint64(uint64_t* out) const {
  if (type != Type::kNumber || text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;  // negative, fraction or exponent
    if (__builtin_mul_overflow(v, uint64_t{10}, &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v)) return false;
  }
  *out = v;
  return true;
}

const Value* Value::find(const std::string& key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

const char* type_name(Value::Type type) {
  switch (type) {
    case Value::Type::kNull: return "null";
    case Value::Type::kBool: return "a boolean";
    case Value::Type::kNumber: return "a number";
    case Value::Type::kString: return "a string";
    case Value::Type::kArray: return "an array";
    case Value::Type::kObject: return "an object";
  }
  return "unknown";
}

Status parse(const char* text, size_t size, Value* out) {
  if (!text && size) return error(Code::kInvalidArgument, "JSON text is null");
  Value v;
  Status s = Parser(text, size).parse_document(&v);
  if (s.ok()) *out = std::move(v);
  return s;
}

Status parse_object_members(const char* text, size_t size, size_t max_values, const MemberFn& each) {
  if (!text && size) return error(Code::kInvalidArgument, "JSON text is null");
  return Parser(text, size, max_values).parse_members(each);
}

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char code[8];
          std::snprintf(code, sizeof(code), "\\u%04x", c);
          out += code;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace sieve::compress::json
