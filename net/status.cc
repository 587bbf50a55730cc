#include "net/status.h"

namespace sieve::net {

const char* code_name(Code code) {
  switch (code) {
    case Code::Ok: return "ok";
    case Code::InvalidArgument: return "invalid argument";
    case Code::InvalidUsage: return "invalid usage";
    case Code::SystemError: return "system error";
    case Code::RemoteError: return "remote error";
    case Code::InternalError: return "internal error";
  }
  return "?";
}

}  // namespace sieve::net
