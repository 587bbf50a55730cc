// Typed result of every transport call. net/ knows no NCCL types: plugin/ maps Code to ncclResult_t.
#pragma once

#include <string>
#include <utility>

namespace sieve::net {

enum class Code {
  Ok,
  InvalidArgument,  // the caller passed something malformed (bad handle, bad device)
  InvalidUsage,     // legal calls in an illegal combination (send larger than the posted receive)
  SystemError,      // the OS refused (socket, thread, memory)
  RemoteError,      // the peer closed, reset, went silent or broke the protocol
  InternalError,    // unsupported request or a Sieve bug
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == Code::Ok; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::Ok;
  std::string message_;
};

inline Status error(Code code, std::string message) { return Status(code, std::move(message)); }

}  // namespace sieve::net
