// SPDX-License-Identifier: Apache-2.0
// The result of a call that can fail, for compress/ and the layers above it (net/ uses the same class
// with its own codes, net/status.h): a code the caller maps to its own codes and a message for the
// user. compress/ never logs; callers decide where messages go.
#pragma once

#include <string>
#include <utility>

namespace sieve::compress {

// One class for every layer; the code enum is the parameter because each layer's codes map to a
// different outside set (SIEVE_ERR_* for compress/, ncclResult_t for net/), and a typed enum keeps
// those mappings exhaustive.
template <typename CodeEnum> class [[nodiscard]] BasicStatus {
 public:
  BasicStatus() = default;
  BasicStatus(CodeEnum code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == CodeEnum::kOk; }
  CodeEnum code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  CodeEnum code_ = CodeEnum::kOk;
  std::string message_;
};

template <typename CodeEnum> BasicStatus<CodeEnum> error(CodeEnum code, std::string message) {
  return BasicStatus<CodeEnum>(code, std::move(message));
}

enum class Code {
  kOk = 0,
  kInvalidArgument,  // null pointer, zero count, mismatched sizes
  kOutOfRange,       // an index or range past the end, overlapping ranges
  kNotFound,         // no such entry
  kMalformed,        // a file or frame that does not follow its format
  kIo,               // the operating system refused (open, read)
};

using Status = BasicStatus<Code>;

inline Status ok_status() { return {}; }

}  // namespace sieve::compress
