// SPDX-License-Identifier: Apache-2.0
// In-process ABI conformance: the built library is dlopened as NCCL would, through each exported
// ncclNetPlugin_vN, and both ends of a loopback connection are driven from this one process (NCCL's
// own pattern for a rank talking to itself through the network).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "plugin/net/abi/net_v12.h"
#include "tests/plugin/net/conformance/pattern.h"
#include "tools/nccl_emulator/plugin_loader.h"

namespace sieve::conformance {
namespace {

constexpr int kTimeoutMs = 20000;

std::unique_ptr<tools::NetPlugin> open_version(int version) {
  setenv("SIEVE_SOCKET_IFNAME", "lo", 1);  // the only interface every machine has
  tools::LoaderOptions options;
  options.version = version;
  std::string error;
  auto net = tools::NetPlugin::open(SIEVE_PLUGIN_PATH, options, &error);
  EXPECT_TRUE(net) << error;
  return net;
}

TEST(PluginLibrary, ExportsEveryNetVersionFrom8To12) {
  std::string error;
  const auto versions = tools::exported_versions(SIEVE_PLUGIN_PATH, &error);
  EXPECT_EQ(versions, (std::vector<int>{12, 11, 10, 9, 8})) << error;
}

TEST(PluginLibrary, NewestVersionIsChosenFirstAsNccl230Does) {
  auto net = open_version(0);
  ASSERT_TRUE(net);
  EXPECT_EQ(net->version(), 12);
}

// v12 widened the virtual-NIC device list and appended rail/plane ids: the plugin must fill the
// v12 layout exactly (NCCL reads railId/planeId; writing the v11 size would leave them garbage).
TEST(PluginLibrary, V12PropertiesFillTheWholeV12StructAndNothingPastIt) {
  setenv("SIEVE_SOCKET_IFNAME", "lo", 1);
  void* handle = dlopen(SIEVE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto* net = static_cast<const abi::ncclNet_v12_t*>(dlsym(handle, "ncclNetPlugin_v12"));
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  abi::ncclNetCommConfig_v12_t config{abi::NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(net->init(&ctx, 7, &config, nullptr, nullptr), abi::ncclSuccess);
  struct {
    abi::ncclNetProperties_v12_t props;
    unsigned char canary[32];
  } out;
  std::memset(&out, 0xAB, sizeof(out));
  ASSERT_EQ(net->getProperties(0, &out.props), abi::ncclSuccess);
  EXPECT_EQ(out.props.railId, abi::NCCL_NET_ID_UNDEF);
  EXPECT_EQ(out.props.planeId, abi::NCCL_NET_ID_UNDEF);
  EXPECT_EQ(out.props.vProps.ndevs, 1);
  EXPECT_EQ(out.props.vProps.devs[0], 0);
  EXPECT_EQ(out.props.maxMultiRequestSize, 1);
  for (unsigned char c : out.canary) ASSERT_EQ(c, 0xAB) << "wrote past the v12 properties";
  EXPECT_EQ(net->finalize(ctx), abi::ncclSuccess);
}

TEST(PluginLibrary, NamesFollowNcclsPluginNamingRule) {
  EXPECT_EQ(tools::plugin_library_name("sieve"), "libnccl-net-sieve.so");
  EXPECT_EQ(tools::plugin_library_name("libnccl-net-sieve.so"), "libnccl-net-sieve.so");
  EXPECT_EQ(tools::plugin_library_name("./build/x.so"), "./build/x.so");
  std::string error;
  EXPECT_FALSE(tools::NetPlugin::open("/nonexistent/libnccl-net-none.so", {}, &error));
  EXPECT_NE(error.find("cannot load"), std::string::npos) << error;
}

class Abi : public ::testing::TestWithParam<int> {};

TEST_P(Abi, InitDevicesAndPropertiesAreSane) {
  auto net = open_version(GetParam());
  ASSERT_TRUE(net);
  EXPECT_STREQ(net->name(), "Sieve");
  ASSERT_EQ(net->init(), tools::kNetSuccess);
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), tools::kNetSuccess);
  ASSERT_GE(ndev, 1);
  for (int dev = 0; dev < ndev; ++dev) {
    tools::NetDeviceInfo info;
    ASSERT_EQ(net->properties(dev, &info), tools::kNetSuccess);
    EXPECT_FALSE(info.name.empty());
    EXPECT_TRUE(info.ptr_support & tools::kPtrHost);
    EXPECT_GT(info.speed_mbps, 0);
    EXPECT_GE(info.max_comms, 1);
    EXPECT_GE(info.max_recvs, 1);
    if (GetParam() >= 9) { EXPECT_GT(info.max_p2p_bytes, 0u); }
    if (GetParam() >= 11) { EXPECT_EQ(info.max_multi_request_size, 1); }
    if (GetParam() >= 12) {
      EXPECT_EQ(info.rail_id, -1) << "no rail knowledge must read as NCCL_NET_ID_UNDEF, not rail 0";
      EXPECT_EQ(info.plane_id, -1);
    }
  }
  tools::NetDeviceInfo info;
  const uint64_t warnings = tools::plugin_warning_count();
  EXPECT_NE(net->properties(ndev, &info), tools::kNetSuccess) << "a device index past the end must be refused";
  EXPECT_GT(tools::plugin_warning_count(), warnings) << "a refused call must say why through NCCL's logger";
  EXPECT_EQ(net->finalize(), tools::kNetSuccess);
}

TEST_P(Abi, LoopbackConnectionInOneProcessCarries32OutstandingRequests) {
  auto net = open_version(GetParam());
  ASSERT_TRUE(net);
  ASSERT_EQ(net->init(), tools::kNetSuccess);
  tools::NetHandle handle;
  void* listen_comm = nullptr;
  ASSERT_EQ(net->listen(0, &handle, &listen_comm), tools::kNetSuccess);
  ASSERT_TRUE(listen_comm);
  void *send_comm = nullptr, *recv_comm = nullptr;
  ASSERT_EQ(tools::connect_accept_until(*net, 0, &handle, listen_comm, &send_comm, &recv_comm, kTimeoutMs),
            tools::kNetSuccess);

  constexpr int kCount = tools::kMaxRequests;
  constexpr size_t kSize = 65536 + 5;
  std::vector<std::vector<unsigned char>> sent(kCount), received(kCount);
  std::vector<void*> send_mr(kCount), recv_mr(kCount), send_req(kCount), recv_req(kCount);
  for (int i = 0; i < kCount; ++i) {
    const size_t size = i == 0 ? 0 : kSize - i;  // 0 B included, receives posted larger than sends
    sent[i].resize(size);
    fill_pattern(sent[i].data(), size, 7, i);
    received[i].assign(kSize + 64, kCanary);
    ASSERT_EQ(net->reg_mr(send_comm, sent[i].data(), size, tools::kPtrHost, &send_mr[i]), tools::kNetSuccess);
    ASSERT_EQ(net->reg_mr(recv_comm, received[i].data(), kSize, tools::kPtrHost, &recv_mr[i]), tools::kNetSuccess);
  }
  // All 32 receives and all 32 sends outstanding at once: NCCL's guaranteed depth.
  for (int i = 0; i < kCount; ++i) {
    void* data = received[i].data();
    size_t size = kSize;
    int tag = i;
    ASSERT_EQ(net->irecv(recv_comm, 1, &data, &size, &tag, &recv_mr[i], &recv_req[i]), tools::kNetSuccess);
    ASSERT_TRUE(recv_req[i]) << "irecv " << i << " of 32 refused";
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(net->isend(send_comm, sent[i].data(), sent[i].size(), i, send_mr[i], &send_req[i]), tools::kNetSuccess);
    ASSERT_TRUE(send_req[i]) << "isend " << i << " of 32 refused";
  }
  // Test oldest first, alternating ends, as one proxy thread does for a rank talking to itself.
  std::vector<bool> send_done(kCount), recv_done(kCount);
  int remaining = 2 * kCount;
  const int64_t deadline = tools::monotonic_ms() + kTimeoutMs;
  while (remaining > 0) {
    ASSERT_LT(tools::monotonic_ms(), deadline) << remaining << " requests still pending";
    for (int i = 0; i < kCount; ++i) {
      int done = 0, size = -1;
      if (!send_done[i]) {
        ASSERT_EQ(net->test(send_req[i], &done, &size), tools::kNetSuccess);
        if (done) {
          EXPECT_EQ(static_cast<size_t>(size), sent[i].size());
          send_done[i] = true;
          --remaining;
        }
      }
      if (!recv_done[i]) {
        ASSERT_EQ(net->test(recv_req[i], &done, &size), tools::kNetSuccess);
        if (done) {
          ASSERT_EQ(static_cast<size_t>(size), sent[i].size()) << "message " << i;
          EXPECT_EQ(first_mismatch(received[i].data(), sent[i].size(), 7, i), sent[i].size()) << "message " << i;
          for (size_t b = sent[i].size(); b < received[i].size(); ++b) {
            ASSERT_EQ(received[i][b], kCanary) << "message " << i << " wrote past its size at " << b;
          }
          recv_done[i] = true;
          --remaining;
        }
      }
    }
  }
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(net->dereg_mr(send_comm, send_mr[i]), tools::kNetSuccess);
    EXPECT_EQ(net->dereg_mr(recv_comm, recv_mr[i]), tools::kNetSuccess);
  }
  EXPECT_EQ(net->close_send(send_comm), tools::kNetSuccess);
  EXPECT_EQ(net->close_recv(recv_comm), tools::kNetSuccess);
  EXPECT_EQ(net->close_listen(listen_comm), tools::kNetSuccess);
  EXPECT_EQ(net->finalize(), tools::kNetSuccess);
}

// Device memory as NCCL hands it over: regMrDmaBuf with the buffer's fd (a memfd stands in for a
// GPU buffer), where getProperties offers NCCL_PTR_DMABUF; then iflush returns a request that
// completes. Without the offer (TCP) the registration must be refused, not faked.
TEST_P(Abi, DmaBufRegistrationAndFlushFollowPtrSupport) {
  auto net = open_version(GetParam());
  ASSERT_TRUE(net);
  ASSERT_EQ(net->init(), tools::kNetSuccess);
  tools::NetDeviceInfo info;
  ASSERT_EQ(net->properties(0, &info), tools::kNetSuccess);
  tools::NetHandle handle;
  void* listen_comm = nullptr;
  ASSERT_EQ(net->listen(0, &handle, &listen_comm), tools::kNetSuccess);
  void *send_comm = nullptr, *recv_comm = nullptr;
  ASSERT_EQ(tools::connect_accept_until(*net, 0, &handle, listen_comm, &send_comm, &recv_comm, kTimeoutMs),
            tools::kNetSuccess);
  constexpr size_t kSize = 1 << 20;
  const int fd = memfd_create("sieve-conformance-dmabuf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  void* device_buffer = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(device_buffer, MAP_FAILED);
  void* recv_mr = nullptr;
  const int registered = net->reg_mr_dmabuf(recv_comm, device_buffer, kSize, tools::kPtrCuda, 0, fd, &recv_mr);
  if (!(info.ptr_support & tools::kPtrDmaBuf)) {
    EXPECT_NE(registered, tools::kNetSuccess) << "dma-buf registration accepted without NCCL_PTR_DMABUF";
  } else {
    ASSERT_EQ(registered, tools::kNetSuccess);
    std::vector<unsigned char> sent(kSize / 2);
    fill_pattern(sent.data(), sent.size(), 3, 0);
    void* send_mr = nullptr;
    ASSERT_EQ(net->reg_mr(send_comm, sent.data(), sent.size(), tools::kPtrHost, &send_mr), tools::kNetSuccess);
    void* data = device_buffer;
    size_t size = kSize;
    int tag = 0;
    void *recv_req = nullptr, *send_req = nullptr;
    ASSERT_EQ(tools::irecv_until(*net, recv_comm, data, size, tag, recv_mr, &recv_req, kTimeoutMs), tools::kNetSuccess);
    ASSERT_EQ(tools::isend_until(*net, send_comm, sent.data(), sent.size(), tag, send_mr, &send_req, kTimeoutMs),
              tools::kNetSuccess);
    int received = -1, reported = -1;
    ASSERT_EQ(tools::wait_until(*net, send_req, &reported, kTimeoutMs), tools::kNetSuccess);
    ASSERT_EQ(tools::wait_until(*net, recv_req, &received, kTimeoutMs), tools::kNetSuccess);
    ASSERT_EQ(static_cast<size_t>(received), sent.size());
    EXPECT_EQ(first_mismatch(static_cast<unsigned char*>(device_buffer), sent.size(), 3, 0), sent.size());
    int flush_size = received;
    void* flush_req = nullptr;
    ASSERT_EQ(net->iflush(recv_comm, 1, &data, &flush_size, &recv_mr, &flush_req), tools::kNetSuccess);
    ASSERT_NE(flush_req, nullptr) << "device memory must be flushed";
    int ignored = -1;
    EXPECT_EQ(tools::wait_until(*net, flush_req, &ignored, kTimeoutMs), tools::kNetSuccess);
    EXPECT_EQ(net->dereg_mr(send_comm, send_mr), tools::kNetSuccess);
    EXPECT_EQ(net->dereg_mr(recv_comm, recv_mr), tools::kNetSuccess);
  }
  munmap(device_buffer, kSize);
  close(fd);
  EXPECT_EQ(net->close_send(send_comm), tools::kNetSuccess);
  EXPECT_EQ(net->close_recv(recv_comm), tools::kNetSuccess);
  EXPECT_EQ(net->close_listen(listen_comm), tools::kNetSuccess);
  EXPECT_EQ(net->finalize(), tools::kNetSuccess);
}

TEST_P(Abi, ListenCloseWithoutAnyPeerReleasesCleanly) {
  auto net = open_version(GetParam());
  ASSERT_TRUE(net);
  ASSERT_EQ(net->init(), tools::kNetSuccess);
  for (int round = 0; round < 3; ++round) {
    tools::NetHandle handle;
    void* listen_comm = nullptr;
    ASSERT_EQ(net->listen(0, &handle, &listen_comm), tools::kNetSuccess);
    void* recv_comm = nullptr;
    ASSERT_EQ(net->accept(listen_comm, &recv_comm), tools::kNetSuccess) << "accept must not block or fail";
    EXPECT_EQ(recv_comm, nullptr);
    EXPECT_EQ(net->close_listen(listen_comm), tools::kNetSuccess);
  }
}

std::string version_name(const ::testing::TestParamInfo<int>& param) { return "v" + std::to_string(param.param); }

INSTANTIATE_TEST_SUITE_P(EveryVersion, Abi, ::testing::Values(8, 9, 10, 11, 12), version_name);

}  // namespace
}  // namespace sieve::conformance
