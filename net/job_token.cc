// SPDX-License-Identifier: Apache-2.0
#include "net/job_token.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "net/socket.h"

namespace sieve::net {

namespace {

bool all_of(const std::string& s, bool (*in)(unsigned char)) {
  for (unsigned char c : s)
    if (!in(c)) return false;
  return true;
}
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool lower_hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f'); }
bool upper_hex(unsigned char c) { return digit(c) || (c >= 'A' && c <= 'F'); }
bool lower_alnum(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'z'); }
bool upper_alnum(unsigned char c) { return digit(c) || (c >= 'A' && c <= 'Z'); }
bool alnum(unsigned char c) { return lower_alnum(c) || (c >= 'A' && c <= 'Z'); }
bool base64(unsigned char c) { return alnum(c) || c == '+' || c == '/' || c == '-' || c == '_'; }
bool printable(unsigned char c) { return c >= 0x20 && c < 0x7f; }

int alphabet_of(const std::string& s) {
  if (all_of(s, digit)) return 10;
  if (all_of(s, lower_hex) || all_of(s, upper_hex)) return 16;
  if (all_of(s, lower_alnum) || all_of(s, upper_alnum)) return 36;
  if (all_of(s, alnum)) return 62;
  if (all_of(s, base64)) return 64;
  if (all_of(s, printable)) return 95;
  return 256;
}

std::string without_padding(const std::string& token) {
  size_t end = token.size();
  while (end > 0 && token[end - 1] == '=') --end;
  const std::string body = token.substr(0, end);
  return end < token.size() && all_of(body, base64) ? body : token;
}

}  // namespace

double job_token_bits(const std::string& token) {
  const std::string body = without_padding(token);
  if (body.empty()) return 0;
  return static_cast<double>(body.size()) * std::log2(static_cast<double>(alphabet_of(body)));
}

Status check_job_token(const std::string& token) {
  if (token.empty()) return ok_status();
  const double bits = job_token_bits(token);
  if (bits >= kMinJobTokenBits) return ok_status();
  const std::string body = without_padding(token);
  char text[400];
  std::snprintf(text, sizeof text,
                "SIEVE_JOB_TOKEN is too weak: %zu characters from a %d-symbol alphabet carry at most %.0f bits, "
                "at least %d are required (length x log2 of the alphabet: e.g. 32 hex digits, `openssl rand -hex 16`, "
                "or 22 base64 characters)",
                body.size(), alphabet_of(body), bits, kMinJobTokenBits);
  return error(Code::kInvalidUsage, text);
}

bool address_is_local(const SocketAddress& address) {
  Fd probe(::socket(address.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return true;  // cannot tell: say nothing rather than warn wrongly
  SocketAddress any_port = address;
  any_port.set_port(0);
  return ::bind(probe.get(), reinterpret_cast<const sockaddr*>(&any_port.storage), any_port.length) == 0;
}

bool TokenlessWarning::should_warn(const std::string& token, const SocketAddress& peer) {
  if (!token.empty() || warned_.load(std::memory_order_relaxed) || address_is_local(peer)) return false;
  return !warned_.exchange(true);
}

TokenlessWarning& TokenlessWarning::process() {
  static TokenlessWarning instance;
  return instance;
}

}  // namespace sieve::net
