// SPDX-License-Identifier: Apache-2.0
#include "net/job_token.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "net/socket.h"

namespace sieve::net {

namespace {

bool all_of(const std::string& s, bool (*in)(unsigned char)) {
  for (unsigned char c : s)
    if (!in(c)) return false;
  return true;
}
bool any_of(const std::string& s, bool (*in)(unsigned char)) {
  for (unsigned char c : s)
    if (in(c)) return true;
  return false;
}
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
bool upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
bool lower_hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f'); }
bool upper_hex(unsigned char c) { return digit(c) || (c >= 'A' && c <= 'F'); }
bool hex_letter(unsigned char c) { return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool base64(unsigned char c) { return digit(c) || lower(c) || upper(c) || c == '+' || c == '/'; }
bool base64url(unsigned char c) { return digit(c) || lower(c) || upper(c) || c == '-' || c == '_'; }

// Why `token` is not random bytes in hex or base64, or "" when it is.
std::string not_random(const std::string& token) {
  constexpr size_t kHexDigits = 2 * kMinJobTokenBytes;                   // 32
  constexpr size_t kBase64Characters = (8 * kMinJobTokenBytes + 5) / 6;  // 22
  if (all_of(token, lower_hex) || all_of(token, upper_hex)) {
    if (token.size() < kHexDigits)
      return "it is " + std::to_string(token.size()) + " hex digits, fewer than " + std::to_string(kHexDigits);
    // 32 random hex digits lack letters or digits with odds of 3e-7 and 2e-14.
    if (!any_of(token, digit) || !any_of(token, hex_letter))
      return "its hex digits are all letters or all digits, as random bytes' almost never are";
    return "";
  }
  size_t end = token.size();
  while (end > 0 && token[end - 1] == '=' && token.size() - end < 2) --end;
  const std::string body = token.substr(0, end);
  const bool padded = end < token.size();
  if (!all_of(body, base64) && !all_of(body, base64url))
    return "it has characters neither hex nor base64 holds (spaces, punctuation, a mix of both base64 alphabets)";
  if (body.size() < kBase64Characters)
    return "it is " + std::to_string(body.size()) + " base64 characters, fewer than " +
           std::to_string(kBase64Characters);
  if (body.size() % 4 == 1 || (padded && token.size() % 4 != 0)) return "it is not a whole base64 encoding";
  // The encoding of 16 random bytes lacks one letter case with odds of about 2e-5; a phrase of
  // words (the welcome lets whoever sees it test guesses offline) nearly always does.
  if (!any_of(body, lower) || !any_of(body, upper))
    return "its base64 letters are all of one case, as random bytes' almost never are (a phrase of words?)";
  return "";
}

}  // namespace

Status check_job_token(const std::string& token) {
  if (token.empty()) return ok_status();
  const std::string why = not_random(token);
  if (why.empty()) return ok_status();
  char text[600];
  std::snprintf(text, sizeof text,
                "SIEVE_JOB_TOKEN must be generated, not chosen: hex or base64 of at least %zu random bytes (at least "
                "128 bits), e.g. `openssl rand -hex 16` (32 hex digits) or `openssl rand -base64 16`; this one is "
                "refused: %s",
                kMinJobTokenBytes, why.c_str());
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
