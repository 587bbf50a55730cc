// SPDX-License-Identifier: Apache-2.0
// SIEVE_JOB_TOKEN's strength rule (said in the error, the token never in it), and the once-per-
// process warning for a connection to another host without a token. Nothing here sends a packet.
#include "net/job_token.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

namespace sieve::net {
namespace {

TEST(JobToken, ADictionaryWordIsRefusedWithTheRuleNotTheToken) {
  const Status st = check_job_token("hunter2");
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("at least 128 bits"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("openssl rand -hex 16"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("hunter2"), std::string::npos) << "the error shows the token";
}

// One welcome lets whoever sees it test guesses offline, and a word phrase
// passed the old rule (length x log2 of its alphabet: 28 characters of base64's alphabet made
// "168 bits"). Only tokens random by construction pass: hex or base64 of at least 16 bytes.
TEST(JobToken, AWordPhraseIsRefusedAndGeneratedTokensPass) {
  for (const char* phrase :
       {"correct-horse-battery-staple", "correct_horse_battery_staple_orbit", "correcthorsebatterystapleorbitlemon",
        "CORRECT-HORSE-BATTERY-STAPLE", "correct horse battery staple", "Correct.Horse.Battery.Staple.9"}) {
    const Status st = check_job_token(phrase);
    EXPECT_EQ(st.code(), Code::kInvalidUsage) << phrase;
    EXPECT_NE(st.message().find("generated, not chosen"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find(phrase), std::string::npos) << "the error shows the token";
  }
  EXPECT_NE(check_job_token("correct-horse-battery-staple").message().find("one case"), std::string::npos);
  EXPECT_NE(check_job_token("correct horse battery staple").message().find("neither hex nor base64"),
            std::string::npos);

  EXPECT_TRUE(check_job_token("").ok()) << "no token: allowed (and warned about when multi-node)";
  EXPECT_TRUE(check_job_token("3f9c0a7e5b1d24c86e0f9a3b7c5d1e2f").ok()) << "openssl rand -hex 16";
  EXPECT_TRUE(check_job_token("3F9C0A7E5B1D24C86E0F9A3B7C5D1E2F").ok()) << "the same, upper case";
  EXPECT_TRUE(check_job_token("q3Vx9+Lk/2mZ8sT0pW4yRb==").ok()) << "openssl rand -base64 16";
  EXPECT_TRUE(check_job_token("q3Vx9-Lk_2mZ8sT0pW4yRb").ok()) << "URL-safe, unpadded (secrets.token_urlsafe(16))";
  EXPECT_TRUE(check_job_token("ZmFrZSB0b2tlbiBmb3IgdGVzdHMgb25seSwgMzIgYnl0ZXM=").ok()) << "base64 of 32 bytes";
  EXPECT_FALSE(check_job_token("3f9c0a7e5b1d24c86e0f9a3b7c5d1e2").ok()) << "31 hex digits";
  EXPECT_FALSE(check_job_token(std::string(32, 'a')).ok()) << "hex of letters only";
  EXPECT_FALSE(check_job_token("012345678901234567890123456789012345678").ok()) << "decimal digits only";
  EXPECT_FALSE(check_job_token("q3Vx9+Lk/2mZ8sT0pW4yR==").ok()) << "21 base64 characters";
  EXPECT_FALSE(check_job_token("q3Vx9+Lk_2mZ8sT0pW4yRb==").ok()) << "both base64 alphabets";
  EXPECT_FALSE(check_job_token("q3Vx9+Lk/2mZ8sT0pW4yRb=").ok()) << "padding of a wrong length";
}

SocketAddress v4(const char* text) {
  SocketAddress a;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, text, &in.sin_addr), 1);
  std::memcpy(&a.storage, &in, sizeof(in));
  a.length = sizeof(in);
  return a;
}

TEST(JobToken, TheTokenlessWarningIsForRemotePeersAndOnce) {
  EXPECT_TRUE(address_is_local(v4("127.0.0.1")));
  EXPECT_FALSE(address_is_local(v4("192.0.2.1")));  // TEST-NET-1: never this host's
  TokenlessWarning w;
  EXPECT_FALSE(w.should_warn("", v4("127.0.0.1"))) << "a single-node job has nobody to guard against";
  EXPECT_FALSE(w.should_warn(std::string(32, 'f'), v4("192.0.2.1"))) << "a token is set";
  EXPECT_TRUE(w.should_warn("", v4("192.0.2.1")));
  EXPECT_FALSE(w.should_warn("", v4("192.0.2.2"))) << "once per process";
}

}  // namespace
}  // namespace sieve::net
