// SPDX-License-Identifier: Apache-2.0
// The verbs transport of a TCP-only build (SIEVE_VERBS=OFF, or AUTO without rdma-core's headers):
// net/ib/ is not compiled, and asking for verbs says why, so SIEVE_TRANSPORT=auto falls back to TCP
// with that reason in its log line and SIEVE_TRANSPORT=ib fails naming it.
#include "net/transport.h"

namespace sieve::net {

Status Transport::create_ib(const TransportOptions&, std::unique_ptr<Transport>* out) {
  out->reset();
  return error(Code::kSystemError, kVerbsNotBuilt);
}

}  // namespace sieve::net
