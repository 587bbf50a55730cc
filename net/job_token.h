// SPDX-License-Identifier: Apache-2.0
// SIEVE_JOB_TOKEN: what it must be, and the warning for a multi-node job that runs without one.
//
// The token gates the handshake only: a peer must prove it knows it (a keyed hash; the token never
// travels) before its sockets join a connection. The frames after the handshake are neither
// encrypted nor authenticated, so an attacker on the path can still read or alter them: isolate
// the network or run it over IPsec/WireGuard, as for NCCL itself. Without a token, the listener's
// 64-bit nonce in NCCL's handle is the only gate, and the handle crosses NCCL's bootstrap in clear.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "net/devices.h"
#include "net/status.h"

namespace sieve::net {

// A welcome lets whoever sees it test guesses offline, so a token must not be guessable: only
// tokens random by construction are accepted, the hex or base64 encoding (standard or URL-safe,
// '=' padding optional) of at least this many bytes. A chosen phrase is refused: characters
// neither encoding has (a space, most punctuation), or, in base64, letters of one case only, which
// the encoding of random bytes almost never has (about 2e-5 for 16 bytes: generate another).
constexpr size_t kMinJobTokenBytes = 16;

// ok for no token or one of that form; else InvalidUsage saying the rule and what the token lacks
// (never the token).
Status check_job_token(const std::string& token);

// True when `address` is one of this host's own (a socket can bind to it); sends nothing.
bool address_is_local(const SocketAddress& address);

// Once per process: a connection to another host without a job token is worth one warning.
class TokenlessWarning {
 public:
  // True the first time a connection to a remote `peer` is made without a token.
  bool should_warn(const std::string& token, const SocketAddress& peer);
  static TokenlessWarning& process();  // process-wide on purpose: "once per process"

 private:
  std::atomic<bool> warned_{false};
};

}  // namespace sieve::net
