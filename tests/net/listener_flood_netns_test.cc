// SPDX-License-Identifier: Apache-2.0
// The many-address flood over a real round trip: two network namespaces joined by a link that delays
// every packet (netem, or sieve-impair where the kernel has none). Node 0 holds 250 more addresses
// and floods node 1's listener from all of them with sockets that say nothing, while a real
// connector, also on node 0, makes connection after connection. Every one must be accepted. The
// durations, attacked and not, are printed (a figure, never asserted). Needs root and namespaces;
// skips, saying why, without them. Threads enter the namespaces with setns, which is per thread.
// A second flood knows more: NCCL's handle (so the listener's nonce) but not the job token, and
// sends whole hellos naming the nonce, never a proof.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "net/wire.h"
#include "tests/net/transport_harness.h"
#include "tools/common/netlab.h"

namespace sieve::net {
namespace {

using Steady = std::chrono::steady_clock;
using tools::NetLab;

constexpr int kAttackerAddresses = 250;  // 10.77.0.3 .. 10.77.0.252, beside the real 10.77.0.1
constexpr int kConnects = 50;            // real connects per run
constexpr size_t kFloodKeptOpen = 1000;  // the flood's open sockets (the oldest closed first)
// Tokens are generated (any 32 hex digits with letters and digits pass the rule).
constexpr char kToken[] = "5f0c8e2b9a41d7736e1f04ab92c85d10";

enum class FloodKind {
  kNone,
  kSilent,       // sockets that say nothing
  kNonceHellos,  // whole hellos naming the listener's nonce, from a peer without the token
};
struct Flood {
  FloodKind kind = FloodKind::kNone;
  int per_second = 0;  // new sockets per second, spread over every address
};

bool enter(const std::string& ns) {
  const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

TransportOptions node_options(const std::string& token) {
  TransportOptions o = testing::loopback_options();
  o.devices.ifname = "=eth0";
  o.peer_timeout_ms = 5000;
  o.job_token = token;
  return o;
}

struct Outcome {
  int failed = 0;
  double flood_per_second = 0;  // what the flood reached
  std::vector<double> ms;       // each connect's duration
  std::string first_error;
};

// A hello as a peer that saw NCCL's handle but lacks the job token can make it: every field right,
// nothing it could only compute with the token.
void encode_nonce_hello(const wire::HandleFields& target, std::mt19937_64& random, uint8_t* out) {
  wire::Hello hello{};
  hello.socket_index = static_cast<uint16_t>(random() % 2);
  hello.nsocks = 1;
  hello.listener_nonce = target.listener_nonce;
  hello.connection_id = random();
  hello.client_nonce = random();
  hello.chunk_size = 128 * 1024;
  wire::encode_hello(hello, out);
}

// Opens flood.per_second sockets a second from every attacker address in turn until `stop`; with
// kNonceHellos each sends its hello once connected. Returns the rate reached.
double run_flood(const Flood& flood, const wire::HandleFields& target, const std::atomic<bool>& stop) {
  std::deque<Fd> open;
  std::deque<int> connecting;  // hello not sent yet: a non-blocking connect is still under way
  std::mt19937_64 random(12345);
  int next = 0;
  long made = 0;
  const auto began = Steady::now();
  const auto period = std::chrono::microseconds(1000000 / flood.per_second);
  auto due = Steady::now();
  while (!stop) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl((10u << 24) | (77u << 16) | (3u + next++ % kAttackerAddresses));
    if (fd.valid() && ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&from), sizeof(from)) == 0) {
      (void)::connect(fd.get(), reinterpret_cast<const sockaddr*>(&target.address.storage), target.address.length);
      if (flood.kind == FloodKind::kNonceHellos) connecting.push_back(fd.get());
      open.push_back(std::move(fd));
      if (open.size() > kFloodKeptOpen) {
        const int gone = open.front().get();
        connecting.erase(std::remove(connecting.begin(), connecting.end(), gone), connecting.end());
        open.pop_front();
      }
      ++made;
    }
    // The oldest connects finish first: send their hellos, in order, until one is still under way.
    while (!connecting.empty()) {
      pollfd p{connecting.front(), POLLOUT, 0};
      if (::poll(&p, 1, 0) != 1) break;
      uint8_t hello[wire::kHelloBytes];
      encode_nonce_hello(target, random, hello);
      (void)::send(connecting.front(), hello, sizeof(hello), MSG_NOSIGNAL | MSG_DONTWAIT);
      connecting.pop_front();
    }
    due += period;
    std::this_thread::sleep_until(due);
  }
  return made / std::chrono::duration<double>(Steady::now() - began).count();
}

// Makes kConnects connections from node 0 to a listener on node 1, with or without a flood.
Outcome connect_many(const NetLab& lab, const Flood& flood, const std::string& token) {
  Outcome run;
  std::atomic<bool> stop{false};
  std::atomic<bool> listening{false};
  Handle handle;
  std::atomic<int> accepted{0};
  std::thread listener([&] {
    if (!enter(lab.ns(1))) return;
    auto transport = testing::make_transport(node_options(token));
    std::unique_ptr<ListenComm> comm;
    if (!transport || !transport->listen(0, &handle, &comm).ok()) return;
    listening = true;
    std::vector<std::unique_ptr<RecvComm>> kept;
    while (!stop) {
      std::unique_ptr<RecvComm> recv;
      if (!comm->accept(&recv).ok()) return;
      if (recv) kept.push_back(std::move(recv)), ++accepted;
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // NCCL's proxy thread yields too
    }
  });
  const auto listen_by = Steady::now() + std::chrono::seconds(5);
  while (!listening && Steady::now() < listen_by) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!listening) {
    stop = true;
    listener.join();
    run.failed = -1;
    run.first_error = "no listener on node 1";
    return run;
  }
  wire::HandleFields target;
  EXPECT_TRUE(wire::decode_handle(handle.bytes, &target).ok());
  std::thread flooder([&] {
    if (flood.kind != FloodKind::kNone && enter(lab.ns(0))) run.flood_per_second = run_flood(flood, target, stop);
  });
  if (flood.kind != FloodKind::kNone)
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the flood fills the listener first
  std::thread connector([&] {
    if (!enter(lab.ns(0))) return;
    auto transport = testing::make_transport(node_options(token));
    for (int i = 0; i < kConnects; ++i) {
      const int before = accepted.load();
      const auto start = Steady::now();
      std::unique_ptr<SendComm> send;
      Status st;
      while (!send && st.ok() && Steady::now() < start + std::chrono::seconds(40)) {
        st = transport->connect(0, &handle, &send);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      while (send && accepted.load() == before && Steady::now() < start + std::chrono::seconds(40))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (!send || accepted.load() == before) {
        if (run.failed++ == 0) run.first_error = st.ok() ? "no connection within 40 s" : st.message();
        continue;
      }
      run.ms.push_back(std::chrono::duration<double, std::milli>(Steady::now() - start).count());
    }
  });
  connector.join();
  stop = true;
  flooder.join();
  listener.join();
  return run;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Two namespaces joined by a 5 ms link, node 0 with 250 attacker addresses besides its own; empty
// when that could be set up, else why not (the caller skips).
std::string set_up_lab(std::unique_ptr<NetLab>* lab) {
  const std::string why = NetLab::unavailable_reason();
  if (!why.empty()) return why;
#ifndef SIEVE_IMPAIR_PATH
  (void)lab;
  return "sieve-impair was not built (needs libnetfilter-queue-dev)";
#else
  *lab = std::make_unique<NetLab>(2, "--p2p --delay 5ms --seed 7 --impair " SIEVE_IMPAIR_PATH);
  if (!(*lab)->ok()) return (*lab)->error();
  std::string batch;
  for (int a = 0; a < kAttackerAddresses; ++a) batch += "addr add 10.77.0." + std::to_string(3 + a) + "/32 dev eth0\n";
  const std::string file = ::testing::TempDir() + "sieve-flood-addresses-" + std::to_string(::getpid());
  if (FILE* f = std::fopen(file.c_str(), "w")) {
    std::fputs(batch.c_str(), f);
    std::fclose(f);
  }
  int status = 0;
  const std::string out = tools::run_command("ip netns exec " + (*lab)->ns(0) + " ip -batch " + file, &status);
  std::remove(file.c_str());
  return status == 0 ? "" : "adding the attacker addresses failed: " + out;
#endif
}

// Connects unattacked, then under `flood`; every connect under it must succeed.
void expect_no_connect_breaks(const NetLab& lab, const Flood& flood, const std::string& token, const char* what) {
  const Outcome calm = connect_many(lab, Flood{}, token);
  ASSERT_EQ(calm.failed, 0) << calm.first_error;
  const Outcome attacked = connect_many(lab, flood, token);
  std::printf(
      "%d connects over a 5 ms link: median %.1f ms unattacked, %.1f ms under a flood of %s at %.0f sockets/s "
      "(%d asked) from %d addresses; %d failed under it\n",
      kConnects, median(calm.ms), median(attacked.ms), what, attacked.flood_per_second, flood.per_second,
      kAttackerAddresses, attacked.failed);
  EXPECT_EQ(attacked.failed, 0) << "first: " << attacked.first_error;
}

TEST(ListenerFloodNetns, ManyAddressesOverADelayedLinkBreakNoRealConnect) {
  std::unique_ptr<NetLab> lab;
  const std::string why = set_up_lab(&lab);
  if (!why.empty()) GTEST_SKIP() << "namespace flood test skipped: " << why;
  expect_no_connect_breaks(*lab, Flood{FloodKind::kSilent, 2000}, "", "silent sockets");
}

// Whoever saw NCCL's handle knows the nonce; without the token its hellos must not take the places
// the real connector's sockets need while their proofs cross the link.
TEST(ListenerFloodNetns, HellosThatKnowOnlyTheNonceBreakNoRealConnect) {
  std::unique_ptr<NetLab> lab;
  const std::string why = set_up_lab(&lab);
  if (!why.empty()) GTEST_SKIP() << "namespace flood test skipped: " << why;
  expect_no_connect_breaks(*lab, Flood{FloodKind::kNonceHellos, 5000}, kToken, "hellos without the token");
}

}  // namespace
}  // namespace sieve::net
