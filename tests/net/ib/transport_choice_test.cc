// SPDX-License-Identifier: Apache-2.0
// SIEVE_TRANSPORT through the plugin NCCL loads: ib is ib or an init error that says why (never a
// silent fallback), auto takes ib where the fake offers a port and TCP where it offers none, saying
// which and why. Each case is a fresh process (the probe), as the configuration is read once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tools/common/subprocess.h"

namespace sieve::net {
namespace {

struct Outcome {
  std::string init;                  // the INIT line's result
  std::vector<std::string> devices;  // DEVICE lines
  std::string transcript;            // everything, log lines included
};

Outcome probe(const std::vector<std::string>& env) {
  std::vector<std::string> full = {"SIEVE_SOCKET_IFNAME=lo", "SIEVE_LOG_LEVEL=info"};
  full.insert(full.end(), env.begin(), env.end());
  std::string error;
  auto child = tools::Child::spawn({SIEVE_PROBE_PATH, SIEVE_PLUGIN_PATH}, full, &error);
  Outcome out;
  if (!child) {
    out.init = "spawn failed: " + error;
    return out;
  }
  std::string line;
  while (child->read_line(&line, 20000)) {
    if (line.rfind("INIT ", 0) == 0) out.init = line.substr(5);
    if (line.rfind("DEVICE ", 0) == 0) out.devices.push_back(line.substr(7));
  }
  out.transcript = child->transcript();
  int status = -1;
  EXPECT_TRUE(child->wait_exit(&status, 20000));
  EXPECT_EQ(status, 0) << out.transcript;
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(TransportChoice, IbWithoutAnyRdmaPortFailsInitSayingWhy) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES="});
  EXPECT_NE(o.init, "ncclSuccess") << o.transcript;
  EXPECT_TRUE(o.devices.empty()) << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "SIEVE_TRANSPORT=ib")) << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "no active RDMA port")) << o.transcript;
}

TEST(TransportChoice, IbWithAnUnmatchedHcaFailsInitNamingTheSpec) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES=fake0:roce:lo:100", "SIEVE_IB_HCA==mlx5_9"});
  EXPECT_NE(o.init, "ncclSuccess") << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "SIEVE_IB_HCA==mlx5_9")) << o.transcript;
}

TEST(TransportChoice, AutoWithoutAnyRdmaPortRunsTcpAndSaysWhy) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "FAKE_VERBS_DEVICES="});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("lo ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.transcript, "transport tcp (SIEVE_TRANSPORT=auto: no active RDMA port")) << o.transcript;
}

TEST(TransportChoice, AutoWithOnlyAnEfaDeviceRunsTcp) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "FAKE_VERBS_DEVICES=efa0:efa::100"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("lo ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.transcript, "rdma: efa0: transport unspecified")) << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "transport tcp (SIEVE_TRANSPORT=auto: no active RDMA port")) << o.transcript;
}

TEST(TransportChoice, AutoWithAnActivePortRunsVerbsAndSaysWhy) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "FAKE_VERBS_DEVICES=fake0:roce:lo:100"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("fake0:1 ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.transcript, "transport ib (SIEVE_TRANSPORT=auto")) << o.transcript;
  // regIsGlobal, as NCCL's IB transport: a buffer registered once per device serves every comm.
  EXPECT_TRUE(contains(o.devices[0], " GLOBAL 1")) << o.devices[0];
}

// Settings only the other transport reads do nothing: the plugin says so at WARN (the default
// level a job's user sees), naming them and why this transport carries the data.
TEST(TransportChoice, TcpOnlySettingsUnderVerbsAreReportedAsWithoutEffect) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES=fake0:roce:lo:100", "SIEVE_NSOCKS=4",
                           "SIEVE_WIRE_CODEC=off", "SIEVE_PEER_TIMEOUT_MS=3000"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  EXPECT_TRUE(contains(o.transcript,
                       "SIEVE_NSOCKS, SIEVE_WIRE_CODEC have no effect: only the TCP transport reads "
                       "them, and verbs carry the data (SIEVE_TRANSPORT=ib)"))
      << o.transcript;
  EXPECT_FALSE(contains(o.transcript, "SIEVE_PEER_TIMEOUT_MS has")) << o.transcript;
}

TEST(TransportChoice, RdmaSettingsWhenAutoFallsBackToTcpAreReportedWithTheReason) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "FAKE_VERBS_DEVICES=", "SIEVE_IB_HCA=mlx5_0"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  EXPECT_TRUE(contains(o.transcript,
                       "SIEVE_IB_HCA has no effect: only the verbs transport reads it, and TCP carries "
                       "the data (SIEVE_TRANSPORT=auto: no active RDMA port"))
      << o.transcript;
}

TEST(TransportChoice, NothingIsReportedWithoutEffectWhenEverySettingApplies) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "FAKE_VERBS_DEVICES=fake0:roce:lo:100", "SIEVE_IB_QPS=2"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  EXPECT_FALSE(contains(o.transcript, "no effect")) << o.transcript;
}

// A cluster tuned for NCCL's IB transport: its NCCL_IB_HCA chooses Sieve's ports too, where
// SIEVE_IB_HCA is unset, and the log says which variable decided.
TEST(TransportChoice, NcclIbHcaChoosesThePortsWhereSieveIbHcaIsUnset) {
  const Outcome o =
      probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES=fake0:roce:lo:100;fake1:roce:lo:100", "NCCL_IB_HCA==fake1"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("fake1:1 ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.transcript, "SIEVE_IB_HCA==fake1 from NCCL_IB_HCA")) << o.transcript;
  const Outcome sieve = probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES=fake0:roce:lo:100;fake1:roce:lo:100",
                               "NCCL_IB_HCA==fake1", "SIEVE_IB_HCA==fake0"});
  ASSERT_EQ(sieve.devices.size(), 1u) << sieve.transcript;
  EXPECT_EQ(sieve.devices[0].rfind("fake0:1 ", 0), 0u) << sieve.devices[0];
}

TEST(TransportChoice, TcpStaysTcpWhereVerbsWouldWork) {
  const Outcome o = probe({"SIEVE_TRANSPORT=tcp", "FAKE_VERBS_DEVICES=fake0:roce:lo:100"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("lo ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.devices[0], " GLOBAL 0")) << o.devices[0] << ": TCP registers nothing, as NCCL's sockets";
}

// A node without a usable libibverbs: the real one is installed on the build machines and an empty
// directory in LD_LIBRARY_PATH cannot hide it, but a file of that name that is no library, first in
// the path, makes dlopen fail as a missing or broken installation does.
class NoVerbsLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sieve-noverbs-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/libibverbs.so.1") << "not a shared library\n";
  }
  void TearDown() override {
    unlink((dir_ + "/libibverbs.so.1").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(NoVerbsLibrary, AutoRunsTcpAndSaysTheLibraryDidNotLoad) {
  const Outcome o = probe({"SIEVE_TRANSPORT=auto", "LD_LIBRARY_PATH=" + dir_});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 1u) << o.transcript;
  EXPECT_EQ(o.devices[0].rfind("lo ", 0), 0u) << o.devices[0];
  EXPECT_TRUE(contains(o.transcript, "transport tcp (SIEVE_TRANSPORT=auto: libibverbs.so.1 could not be loaded"))
      << o.transcript;
}

TEST_F(NoVerbsLibrary, IbFailsInitSayingWhatToInstall) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib", "LD_LIBRARY_PATH=" + dir_});
  EXPECT_NE(o.init, "ncclSuccess") << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "SIEVE_TRANSPORT=ib: libibverbs.so.1 could not be loaded")) << o.transcript;
  EXPECT_TRUE(contains(o.transcript, "libibverbs1")) << o.transcript;
}

// What getProperties tells NCCL about a verbs port: host memory always, dma-buf where the port's
// probe accepted one (the fake's does), and the per-message limit the immediates allow.
// maxP2pBytes is the lower of what an immediate can say (2 GiB - 1) and what one work request may
// carry on the port (max_msg_sz: 1 GiB on mlx5, the fake's default).
TEST(TransportChoice, VerbsPortsReportDmaBufAndTheirMessageLimit) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib",
                           "FAKE_VERBS_DEVICES=fake0:roce:lo:100;fake1:ib:lo:200;fake2:ib::200:max_msg_sz=4294967295"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 3u) << o.transcript;
  for (const auto& d : o.devices) EXPECT_TRUE(contains(d, " PTR 5 ")) << d << " (host | dma-buf)";
  EXPECT_TRUE(contains(o.devices[0], " MAXP2P 1073741824 ")) << o.devices[0];
  EXPECT_TRUE(contains(o.devices[1], " MAXP2P 1073741824 ")) << o.devices[1];
  EXPECT_TRUE(contains(o.devices[2], " MAXP2P 2147483647 ")) << o.devices[2];
}

// NCCL tells the ports of one card apart by (GUID, port): with port 0 for both, the two ports of a
// dual-port card would be taken for one NIC and half of its bandwidth left unused.
TEST(TransportChoice, TheTwoPortsOfOneCardReportOneGuidAndTheirOwnPortNumbers) {
  const Outcome o = probe({"SIEVE_TRANSPORT=ib", "FAKE_VERBS_DEVICES=dual0:ib::200:ports=2"});
  ASSERT_EQ(o.init, "ncclSuccess") << o.transcript;
  ASSERT_EQ(o.devices.size(), 2u) << o.transcript;
  EXPECT_TRUE(contains(o.devices[0], "dual0:1 ")) << o.devices[0];
  EXPECT_TRUE(contains(o.devices[0], " PORT 1 ")) << o.devices[0];
  EXPECT_TRUE(contains(o.devices[1], "dual0:2 ")) << o.devices[1];
  EXPECT_TRUE(contains(o.devices[1], " PORT 2 ")) << o.devices[1];
  const auto guid = [](const std::string& d) { return d.substr(d.find(" GUID ")); };
  EXPECT_EQ(guid(o.devices[0]), guid(o.devices[1])) << "one card, one node GUID";
  EXPECT_NE(guid(o.devices[0]), " GUID 0");
}

}  // namespace
}  // namespace sieve::net
