// SPDX-License-Identifier: Apache-2.0
// Typed result of every transport call. net/ knows no NCCL types: plugin/ maps Code to ncclResult_t.
#pragma once

#include <string>
#include <utility>

namespace sieve::net {

enum class Code {
  kOk,
  kInvalidArgument,  // the caller passed something malformed (bad handle, bad device)
  kInvalidUsage,     // legal calls in an illegal combination (send larger than the posted receive)
  kSystemError,      // the OS refused (socket, thread, memory)
  kRemoteError,      // the peer closed, reset, went silent or broke the protocol
  kInternalError,    // unsupported request or a Sieve bug
};

const char* code_name(Code code);

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

}  // namespace sieve::net
