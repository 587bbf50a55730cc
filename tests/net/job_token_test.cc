// SPDX-License-Identifier: Apache-2.0
// SIEVE_JOB_TOKEN's strength rule (said in the error, the token never in it), and the once-per-
// process warning for a connection to another host without a token. Nothing here sends a packet.
#include "net/job_token.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cmath>
#include <cstring>

namespace sieve::net {
namespace {

TEST(JobToken, ADictionaryWordIsRefusedWithTheRuleNotTheToken) {
  const Status st = check_job_token("hunter2");
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("128"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("7 characters from a 36-symbol alphabet"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("hunter2"), std::string::npos) << "the error shows the token";
}

TEST(JobToken, LengthTimesAlphabetDecides) {
  EXPECT_TRUE(check_job_token("").ok()) << "no token: allowed (and warned about when multi-node)";
  EXPECT_TRUE(check_job_token(std::string(32, 'a') + "").ok()) << "32 hex digits: 128 bits";
  EXPECT_FALSE(check_job_token("0123456789abcdef0123456789abcde").ok()) << "31 hex digits";
  EXPECT_TRUE(check_job_token("q3Vx9+Lk/2mZ8sT0pW4yRb==").ok()) << "22 base64 characters and padding";
  EXPECT_FALSE(check_job_token("q3Vx9+Lk/2mZ8sT0pW4yR==").ok()) << "21 base64 characters";
  EXPECT_TRUE(check_job_token("012345678901234567890123456789012345678").ok()) << "39 decimal digits: 129 bits";
  EXPECT_FALSE(check_job_token("correct-horse").ok());
  EXPECT_NEAR(job_token_bits("ffff"), 16.0, 1e-9);
  EXPECT_NEAR(job_token_bits(std::string(10, 'A') + "b"), 11 * std::log2(62.0), 1e-9);
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
