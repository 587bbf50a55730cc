// SPDX-License-Identifier: Apache-2.0
// The result of compress/ operations that can fail: a code the C API maps to its own codes and a
// message for the user. compress/ never logs; callers decide where messages go.
#pragma once

#include <string>
#include <utility>

namespace sieve::compress {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // null pointer, zero count, mismatched sizes
  kOutOfRange,       // an index or range past the end, overlapping ranges
  kNotFound,         // no such entry
  kMalformed,        // a file or frame that does not follow its format
  kIo,               // the operating system refused (open, read)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status ok_status() { return {}; }
inline Status error(Code code, std::string message) { return Status(code, std::move(message)); }

}  // namespace sieve::compress
