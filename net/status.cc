// SPDX-License-Identifier: Apache-2.0
#include "net/status.h"

namespace sieve::net {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kInvalidUsage: return "invalid usage";
    case Code::kSystemError: return "system error";
    case Code::kRemoteError: return "remote error";
    case Code::kInternalError: return "internal error";
  }
  return "?";
}

}  // namespace sieve::net
