// SPDX-License-Identifier: Apache-2.0
// Typed result of every transport call: compress/'s Status class with net/'s codes. net/ knows no
// NCCL types: plugin/ maps Code to ncclResult_t.
#pragma once

#include "compress/status.h"

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

using Status = compress::BasicStatus<Code>;
using compress::error;

inline Status ok_status() { return {}; }

}  // namespace sieve::net
