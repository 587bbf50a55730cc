// SPDX-License-Identifier: Apache-2.0
// A peer whose host vanishes mid-transfer (no RST, no FIN, nothing acknowledged) must still be
// declared dead within about SIEVE_PEER_TIMEOUT_MS, now that the kernel's TCP_USER_TIMEOUT is no
// longer used (it also killed slow receivers, see transport_test). The cut is made with a DROP
// rule in a private network namespace, so the machine's own network is untouched; without root
// (no namespace) the test skips. Both directions: packets dropped on their way in (a
// black-holed receiver: the sender's retransmissions go unanswered) and on their way out of the
// sender's own host (a black-holed sender namespace: the kernel never counts those as retransmitted,
// and sends that completed into the kernel's buffer leave nothing blocked). Each must be declared
// within a bound (four peer timeouts here, generous for a loaded machine); the elapsed time is printed.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

// Exit codes of the child that runs the scenario.
constexpr int kDeclaredDead = 0, kNoNamespace = 77, kNoError = 10, kWrongError = 11, kSetupFailed = 12;

// `rule` cuts loopback; the sender then has `message` bytes to send after the cut (0: a transfer
// already under way). Returns an exit code for the parent.
int run_cut_scenario(const char* rule, size_t message) {
  if (::unshare(CLONE_NEWNET) != 0) return kNoNamespace;
  if (std::system("ip link set lo up") != 0) return kNoNamespace;
  TransportOptions options = testing::loopback_options();
  options.peer_timeout_ms = 500;
  auto transport = testing::make_transport(options);
  testing::Pair pair;
  if (!transport || !testing::connect_pair(*transport, *transport, &pair).ok()) return kSetupFailed;
  std::vector<char> out(256 << 20, 1), in(out.size());
  Request* r = nullptr;
  Request* s = nullptr;
  if (!pair.recv->irecv(in.data(), in.size(), &r).ok()) return kSetupFailed;
  Completion c;
  if (message == 0) {
    if (!pair.send->isend(out.data(), out.size(), &s).ok()) return kSetupFailed;
    // Let data flow, then cut the link.
    for (int i = 0; i < 20; ++i)
      if (!s->test(&c).ok() || c.done) return kSetupFailed;
  }
  if (std::system((std::string("iptables -I ") + rule + " -p tcp -j DROP 2>/dev/null").c_str()) != 0)
    return kNoNamespace;
  const auto cut = std::chrono::steady_clock::now();
  const auto deadline = cut + std::chrono::milliseconds(4 * options.peer_timeout_ms);
  // Small sends complete into the kernel's buffer; the comm must still fail, seen on a later call.
  Status st = ok_status();
  while (st.ok() && std::chrono::steady_clock::now() < deadline) {
    if (s == nullptr && !(st = pair.send->isend(out.data(), message, &s)).ok()) break;
    if (s == nullptr) continue;  // not accepted now: try again
    st = s->test(&c);
    if (st.ok() && c.done) s = nullptr;
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut);
  if (st.ok()) return kNoError;
  if (st.code() != Code::kRemoteError) return kWrongError;
  std::fprintf(stderr, "sender (%s): declared dead %lld ms after the cut (SIEVE_PEER_TIMEOUT_MS=%d): %s\n", rule,
               static_cast<long long>(elapsed.count()), options.peer_timeout_ms, st.message().c_str());
  return kDeclaredDead;
}

void expect_declared_dead(const char* rule, size_t message) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(run_cut_scenario(rule, message));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the scenario crashed";
  if (WEXITSTATUS(status) == kNoNamespace) GTEST_SKIP() << "needs root for a private network namespace with iptables";
  EXPECT_EQ(WEXITSTATUS(status), kDeclaredDead)
      << "10: not declared dead within 4 peer timeouts; 11: not a remote error; 12: set-up failed";
}

// The receiver's host is gone: nothing reaches it any more, mid-transfer.
TEST(VanishedHost, ASenderWhosePeerStopsAcknowledgingFailsWithAClearError) { expect_declared_dead("INPUT -i lo", 0); }

// The sender's own namespace drops what it sends: mid-transfer, and for a send of 1 MiB (on the data
// sockets) or 4 KiB (inline, on the control socket) made after the cut, which completes into the
// kernel's buffer and leaves nothing blocked.
TEST(VanishedHost, ASenderWhoseOwnHostDropsItsPacketsMidTransferFails) { expect_declared_dead("OUTPUT -o lo", 0); }
TEST(VanishedHost, ASenderWhoseOwnHostDropsACompletedSendFails) { expect_declared_dead("OUTPUT -o lo", 1 << 20); }
TEST(VanishedHost, ASenderWhoseOwnHostDropsACompletedInlineSendFails) { expect_declared_dead("OUTPUT -o lo", 4096); }

}  // namespace
}  // namespace sieve::net
