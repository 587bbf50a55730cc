// A peer whose host vanishes mid-transfer (no RST, no FIN, nothing acknowledged) must still be
// declared dead within about SIEVE_PEER_TIMEOUT_MS, now that the kernel's TCP_USER_TIMEOUT is no
// longer used (it also killed slow receivers, see transport_test). The cut is made with a DROP
// rule in a private network namespace, so the machine's own network is untouched; without root
// (no namespace) the test skips.
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

int run_cut_scenario() {
  if (::unshare(CLONE_NEWNET) != 0) return kNoNamespace;
  if (std::system("ip link set lo up") != 0) return kNoNamespace;
  TransportOptions options = testing::loopback_options();
  options.peer_timeout_ms = 500;
  auto transport = testing::make_transport(options);
  testing::Pair pair;
  if (!transport || !testing::connect_pair(*transport, *transport, &pair).is_ok()) return kSetupFailed;
  std::vector<char> out(256 << 20, 1), in(out.size());
  Request* r = nullptr;
  Request* s = nullptr;
  if (!pair.recv->irecv(in.data(), in.size(), &r).is_ok() || !pair.send->isend(out.data(), out.size(), &s).is_ok())
    return kSetupFailed;
  // Let data flow, then cut the link: every TCP segment on loopback is dropped from now on.
  Completion c;
  for (int i = 0; i < 20; ++i)
    if (!s->test(&c).is_ok() || c.done) return kSetupFailed;
  if (std::system("iptables -I INPUT -i lo -p tcp -j DROP 2>/dev/null") != 0) return kNoNamespace;
  Status st = testing::wait(s, &c, std::chrono::seconds(30));
  if (st.is_ok()) return kNoError;
  if (st.code() != Code::RemoteError) return kWrongError;
  std::fprintf(stderr, "sender: %s\n", st.message().c_str());
  return kDeclaredDead;
}

TEST(VanishedHost, ASenderWhosePeerStopsAcknowledgingFailsWithAClearError) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(run_cut_scenario());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the scenario crashed";
  if (WEXITSTATUS(status) == kNoNamespace) GTEST_SKIP() << "needs root for a private network namespace with iptables";
  EXPECT_EQ(WEXITSTATUS(status), kDeclaredDead) << "10: no error at all; 11: not a remote error; 12: set-up failed";
}

}  // namespace
}  // namespace sieve::net
