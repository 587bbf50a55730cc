// SPDX-License-Identifier: Apache-2.0
// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), written here so the job-token handshake needs no
// crypto dependency. Used only to prove knowledge of SIEVE_JOB_TOKEN; the token never leaves the host.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sieve::net {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(const void* data, size_t size);
Digest hmac_sha256(const std::string& key, const void* message, size_t size);
// Compares without an early exit, so timing does not reveal how much of a MAC matched.
bool digest_equal(const uint8_t* a, const uint8_t* b, size_t size);

}  // namespace sieve::net
