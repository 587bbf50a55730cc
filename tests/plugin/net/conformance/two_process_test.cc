// SPDX-License-Identifier: Apache-2.0
// Two-process conformance: a receiver and a sender process (sieve_conformance_peer) load the built
// plugin through every exported ABI version and talk over loopback, or from two network namespaces
// joined through a veth switch that the test builds and removes. Every wait is bounded.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tests/common/liveness.h"
#include "tests/plugin/net/conformance/harness.h"
#include "tools/nccl_emulator/plugin_loader.h"

namespace sieve::conformance {
namespace {

enum class Link { kLoopback, kNetns };
std::ostream& operator<<(std::ostream& out, Link link) {
  return out << (link == Link::kLoopback ? "loopback" : "netns");
}

struct PeerSpec {
  std::string scenario;
  std::string ns;  // "" = this namespace, over loopback
  std::vector<std::string> env;
};

class TwoProcess : public ::testing::TestWithParam<std::tuple<int, Link>> {
 protected:
  void SetUp() override {
    if (link() == Link::kNetns) {
      const std::string why = NetLab::unavailable_reason();
      if (!why.empty()) GTEST_SKIP() << "namespace tests skipped: " << why;
      lab_ = std::make_unique<NetLab>(2, "--p2p");
      ASSERT_TRUE(lab_->ok()) << "netlab up failed: " << lab_->error();
      // Over verbs, the fake libibverbs's abstract sockets stay inside one network namespace: the
      // two nodes' fake devices meet through socket files in a directory both can see.
      const char* transport = getenv("SIEVE_TRANSPORT");
      if (transport && std::string(transport) == "ib") {
        char dir[] = "/tmp/sieve-fv-XXXXXX";
        ASSERT_NE(mkdtemp(dir), nullptr) << "mkdtemp: " << strerror(errno);
        fake_verbs_dir_ = dir;
      }
    }
  }

  void TearDown() override {
    if (!fake_verbs_dir_.empty()) std::filesystem::remove_all(fake_verbs_dir_);
  }

  int version() const { return std::get<0>(GetParam()); }
  Link link() const { return std::get<1>(GetParam()); }
  std::string ns(int node) const { return lab_ ? lab_->ns(node) : ""; }

  // The receiver runs on node 0, the sender on node 1.
  std::unique_ptr<Child> start(const std::string& role, const std::string& scenario, const std::string& handle,
                               const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv;
    const std::string where = ns(role == "recv" ? 0 : 1);
    if (!where.empty()) argv = {"ip", "netns", "exec", where};
    for (const char* a : {SIEVE_PEER_PATH, "--plugin", SIEVE_PLUGIN_PATH, "--role"}) argv.push_back(a);
    argv.push_back(role);
    argv.insert(argv.end(), {"--version", std::to_string(version()), "--scenario", scenario});
    if (!handle.empty()) argv.insert(argv.end(), {"--handle", handle});
    std::vector<std::string> env = {std::string("SIEVE_SOCKET_IFNAME=") + (lab_ ? "=eth0" : "lo"),
                                    "SIEVE_LOG_LEVEL=warn"};
    if (!fake_verbs_dir_.empty()) env.push_back("FAKE_VERBS_SOCKET_DIR=" + fake_verbs_dir_);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::string error;
    auto child = Child::spawn(argv, env, &error);
    EXPECT_TRUE(child) << error;
    return child;
  }

  std::unique_ptr<Child> start_receiver(const std::string& scenario, std::string* handle,
                                        const std::vector<std::string>& env = {}) {
    auto receiver = start("recv", scenario, "", env);
    if (!receiver) return nullptr;
    std::string line;
    if (!receiver->expect_line({"HANDLE ", "FAIL"}, &line, 30000) || line.rfind("HANDLE ", 0) != 0) {
      ADD_FAILURE() << "receiver gave no handle:\n" << receiver->transcript();
      return nullptr;
    }
    *handle = line.substr(7);
    return receiver;
  }

  // Both peers' verdicts; stops early when one fails, since its partner would only time out.
  static std::pair<std::string, std::string> verdicts(Child& receiver, Child& sender, int timeout_ms) {
    std::string got[2];
    Child* peers[2] = {&receiver, &sender};
    const int64_t deadline = tools::monotonic_ms() + timeout_ms;
    while (tools::monotonic_ms() < deadline && (got[0].empty() || got[1].empty())) {
      for (int i = 0; i < 2; ++i) {
        std::string line;
        if (got[i].empty() && !peers[i]->stdout_closed() && peers[i]->read_line(&line, 20) &&
            (line.rfind("OK", 0) == 0 || line.rfind("FAIL", 0) == 0)) {
          got[i] = line;
        }
      }
      if (got[0].rfind("FAIL", 0) == 0 || got[1].rfind("FAIL", 0) == 0) break;
      if (peers[0]->stdout_closed() && peers[1]->stdout_closed()) break;
    }
    for (int i = 0; i < 2; ++i) {
      if (got[i].empty()) got[i] = "no verdict:\n" + peers[i]->transcript();
    }
    return {got[0], got[1]};
  }

  static std::string verdict(Child& child, int timeout_ms) {
    std::string line;
    if (!child.expect_line({"OK", "FAIL"}, &line, timeout_ms)) return "no verdict:\n" + child.transcript();
    return line;
  }

  static void expect_clean_exit(Child& child, const char* who) {
    int status = -1;
    ASSERT_TRUE(child.wait_exit(&status, 20000)) << who << " did not exit within 20 s";
    EXPECT_EQ(status, 0) << who << " exit status\n" << child.transcript();
  }

  // A full transfer whose both ends must say OK.
  void transfer(const std::string& scenario, const std::vector<std::string>& env = {}) {
    std::string handle;
    auto receiver = start_receiver(scenario, &handle, env);
    ASSERT_TRUE(receiver);
    auto sender = start("send", scenario, handle, env);
    ASSERT_TRUE(sender);
    const auto [received, sent] = verdicts(*receiver, *sender, 90000);
    EXPECT_EQ(received.rfind("OK", 0), 0u) << "receiver: " << received;
    EXPECT_EQ(sent.rfind("OK", 0), 0u) << "sender: " << sent;
    sender->close_stdin();
    expect_clean_exit(*receiver, "receiver");
    expect_clean_exit(*sender, "sender");
  }

  // Kills one end mid-stream of 64 MiB messages; the other must report an error within 5 s.
  void kill_mid_transfer(bool kill_sender) {
    std::string handle;
    auto receiver = start_receiver("stream", &handle);
    ASSERT_TRUE(receiver);
    auto sender = start("send", "stream", handle);
    ASSERT_TRUE(sender);
    Child& victim = kill_sender ? *sender : *receiver;
    Child& survivor = kill_sender ? *receiver : *sender;
    std::string line;
    ASSERT_TRUE(survivor.expect_line({"PROGRESS"}, &line, 30000)) << "no transfer started:\n" << survivor.transcript();
    victim.kill_now();
    const int64_t killed_at = tools::monotonic_ms();
    ASSERT_TRUE(survivor.expect_line({"ERROR", "STALLED", "FAIL"}, &line, 15000))
        << "survivor neither failed nor finished 15 s after its peer died:\n"
        << survivor.transcript();
    ASSERT_EQ(line.rfind("ERROR ", 0), 0u) << line;
    const long long error_at = atoll(line.c_str() + 6);
    EXPECT_LE(error_at - killed_at, liveness::bound(std::chrono::milliseconds(5000)).count())
        << "error came " << error_at - killed_at << " ms after the kill: " << line;
    survivor.close_stdin();
    expect_clean_exit(survivor, "survivor");
  }

  std::unique_ptr<NetLab> lab_;
  std::string fake_verbs_dir_;  // socket files of the fake verbs devices (ib over namespaces only)
};

TEST_P(TwoProcess, SizesFromZeroTo64MiBWith32OutstandingArriveByteExact) { transfer("matrix"); }

// The receiver closes and its process exits right after its last message: every send still
// completes as sent (over verbs, the last acknowledgements may never come; the data did land).
TEST_P(TwoProcess, AReceiverExitingRightAfterItsLastMessageLeavesEverySendComplete) {
  for (int round = 0; round < 10 && !HasFailure(); ++round) transfer("quickclose");
}

TEST_P(TwoProcess, SendLargerThanPostedReceiveIsAnErrorNotAnOverflow) {
  std::string handle;
  auto receiver = start_receiver("oversize", &handle);
  ASSERT_TRUE(receiver);
  auto sender = start("send", "oversize", handle);
  ASSERT_TRUE(sender);
  const std::string received = verdict(*receiver, 30000);
  EXPECT_EQ(received.rfind("OK rejected", 0), 0u) << received;
  sender->close_stdin();
  expect_clean_exit(*receiver, "receiver");
  expect_clean_exit(*sender, "sender");
}

TEST_P(TwoProcess, KilledSenderGivesTheReceiverAnErrorWithin5s) { kill_mid_transfer(true); }

TEST_P(TwoProcess, KilledReceiverGivesTheSenderAnErrorWithin5s) { kill_mid_transfer(false); }

TEST_P(TwoProcess, StrayAndGarbageClientsAreDroppedAndTheRealPeerStillConnects) {
  std::string handle;
  auto receiver = start_receiver("small", &handle);
  ASSERT_TRUE(receiver);
  const auto listening = listening_sockets(receiver->pid());
  ASSERT_FALSE(listening.empty()) << "the receiver has no listening TCP socket after listen()";
  std::vector<int> held;
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 7919 + 13) & 0xff);
  for (const auto& socket_info : listening) {
    std::string host = socket_info.address;
    if (host == "0.0.0.0" || host == "::") host = lab_ ? lab_->addr(0) : "127.0.0.1";
    std::string error;
    // A client that connects and says nothing, held open while the real peer connects.
    const int silent = open_tcp_client(ns(0), host, socket_info.port, &error);
    ASSERT_GE(silent, 0) << error;
    held.push_back(silent);
    // A client that sends garbage (held open too), one that sends garbage and leaves, one that just leaves.
    for (int kind = 0; kind < 3; ++kind) {
      const int fd = open_tcp_client(ns(0), host, socket_info.port, &error);
      ASSERT_GE(fd, 0) << error;
      if (kind < 2) (void)send(fd, garbage.data(), kind == 0 ? garbage.size() : 200, MSG_NOSIGNAL);
      if (kind == 0) {
        held.push_back(fd);
      } else {
        close(fd);
      }
    }
  }
  usleep(300 * 1000);
  auto sender = start("send", "small", handle);
  ASSERT_TRUE(sender);
  const auto [received, sent] = verdicts(*receiver, *sender, 60000);
  EXPECT_EQ(received.rfind("OK", 0), 0u) << "receiver: " << received;
  EXPECT_EQ(sent.rfind("OK", 0), 0u) << "sender: " << sent;
  for (const int fd : held) close(fd);
  sender->close_stdin();
  expect_clean_exit(*receiver, "receiver");
  expect_clean_exit(*sender, "sender");
}

TEST_P(TwoProcess, WrongJobTokenIsRefused) {
  std::string handle;
  auto receiver = start_receiver("token", &handle, {"SIEVE_JOB_TOKEN=b7a05e0c41d9a7b3f26e8c19d4f0a6e2"});
  ASSERT_TRUE(receiver);
  auto sender = start("send", "token", handle, {"SIEVE_JOB_TOKEN=a1f09d27f1c4e06ab853d1c7e2b94f08"});
  ASSERT_TRUE(sender);
  const auto [received, sent] = verdicts(*receiver, *sender, 30000);
  EXPECT_EQ(received.rfind("OK refused", 0), 0u) << "receiver: " << received;
  EXPECT_EQ(sent.rfind("OK", 0), 0u) << "sender: " << sent;
  sender->close_stdin();
  expect_clean_exit(*receiver, "receiver");
  expect_clean_exit(*sender, "sender");
}

TEST_P(TwoProcess, MatchingJobTokenConnects) {
  transfer("small", {"SIEVE_JOB_TOKEN=5a3e3b8e6f0a2d5c7914e0b6d1c8f27a"});
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<int, Link>>& param) {
  return std::string(std::get<1>(param.param) == Link::kLoopback ? "loopback" : "netns") + "_v" +
         std::to_string(std::get<0>(param.param));
}

INSTANTIATE_TEST_SUITE_P(EveryVersion, TwoProcess,
                         ::testing::Combine(::testing::Values(8, 9, 10, 11, 12),
                                            ::testing::Values(Link::kLoopback, Link::kNetns)),
                         name_of);

}  // namespace
}  // namespace sieve::conformance
