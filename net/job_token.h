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
#include <string>

#include "net/devices.h"
#include "net/status.h"

namespace sieve::net {

// A welcome lets whoever sees it test guesses offline, so a token must resist a dictionary: at
// least this many bits by the rule below.
constexpr int kMinJobTokenBits = 128;

// Entropy bound of a token: its length times log2 of the smallest alphabet holding every character
// (digits 10, hex digits of one case 16, one case and digits 36, letters and digits 62, base64 64
// with '=' padding not counted, printable ASCII 95, anything else 256). An upper bound: a phrase
// of dictionary words scores far above what it holds, so generate the token (openssl rand -hex 16).
double job_token_bits(const std::string& token);
// ok for no token or one of at least kMinJobTokenBits; else InvalidUsage saying the rule (never the token).
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
