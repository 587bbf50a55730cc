// SPDX-License-Identifier: Apache-2.0
// The adapter behind the ABI shims: reference-counted process state, properties, status mapping,
// memory registration rules, and a message through net_* exactly as the shims pass it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "plugin/net/net_plugin.h"
#include "plugin/net/peer_traffic.h"
#include "plugin/stats.h"

namespace sieve::plugin {
namespace {

using namespace abi;

class Adapter : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The process registry reads the environment once; every test here uses loopback.
    setenv("SIEVE_SOCKET_IFNAME", "=lo", 1);
    setenv("SIEVE_SOCKET_FAMILY", "ipv4", 1);
  }
};

ncclResult_t wait(void* request, size_t* size) {
  int done = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done && std::chrono::steady_clock::now() < end) {
    ncclResult_t r = net_test(request, &done, size);
    if (r != ncclSuccess) return r;
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return done ? ncclSuccess : ncclInternalError;
}

TEST_F(Adapter, ContextsShareReferenceCountedState) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(net_init_context(&a, 1, -1, nullptr), ncclSuccess);
  ASSERT_EQ(net_init_context(&b, 2, -1, nullptr), ncclSuccess);
  EXPECT_EQ(net_state_references(), 2);
  int ndev = 0;
  ASSERT_EQ(net_devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1);
  EXPECT_EQ(net_finalize(a), ncclSuccess);
  EXPECT_EQ(net_state_references(), 1);
  EXPECT_EQ(net_finalize(b), ncclSuccess);
  EXPECT_EQ(net_state_references(), 0);
  EXPECT_EQ(net_devices(&ndev), ncclInvalidUsage);  // released: NCCL must init again
}

TEST_F(Adapter, PropertiesAreReal) {
  void* ctx = nullptr;
  ASSERT_EQ(net_init_context(&ctx, 1, -1, nullptr), ncclSuccess);
  DeviceProperties p;
  ASSERT_EQ(net_properties(0, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.pci_path, nullptr);  // loopback is virtual
  EXPECT_EQ(p.ptr_support, NCCL_PTR_HOST);
  EXPECT_GT(p.speed_mbps, 0);
  EXPECT_GT(p.max_comms, 0);
  EXPECT_EQ(p.max_recvs, 1);
  EXPECT_EQ(p.max_p2p_bytes, kMaxNetSizeBytes);
  EXPECT_EQ(net_properties(5, &p), ncclInvalidArgument);
  EXPECT_EQ(net_finalize(ctx), ncclSuccess);
}

TEST_F(Adapter, MessageThroughTheAdapterCountsTraffic) {
  void* ctx = nullptr;
  ASSERT_EQ(net_init_context(&ctx, 7, -1, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  ASSERT_EQ(net_listen(ctx, 0, handle, &listen), ncclSuccess);
  void* send = nullptr;
  void* recv = nullptr;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((!send || !recv) && std::chrono::steady_clock::now() < end) {
    if (!send) { ASSERT_EQ(net_connect(ctx, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, &send), ncclSuccess); }
    if (!recv) { ASSERT_EQ(net_accept(listen, &recv), ncclSuccess); }
  }
  ASSERT_TRUE(send && recv);

  void* mh = nullptr;
  std::vector<char> out(3 << 20, 'x'), in(4 << 20);
  ASSERT_EQ(net_reg_mr(send, out.data(), out.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  EXPECT_NE(mh, nullptr);
  void* cuda = nullptr;
  EXPECT_EQ(net_reg_mr(send, out.data(), out.size(), NCCL_PTR_CUDA, &cuda), ncclInternalError);
  EXPECT_EQ(net_reg_mr_dmabuf(send, out.data(), out.size(), NCCL_PTR_DMABUF, 0, -1, &cuda), ncclInternalError);

  uint64_t before = process_stats().bytes_logical_received.load();
  void* data[1] = {in.data()};
  size_t sizes[1] = {in.size()};
  int tags[1] = {0};
  void* mhandles[1] = {mh};
  void* rreq = nullptr;
  void* sreq = nullptr;
  ASSERT_EQ(net_irecv(recv, 1, data, sizes, tags, mhandles, &rreq), ncclSuccess);
  ASSERT_EQ(net_isend(send, out.data(), out.size(), 0, mh, &sreq), ncclSuccess);
  size_t got = 0, sent = 0;
  ASSERT_EQ(wait(sreq, &sent), ncclSuccess);
  ASSERT_EQ(wait(rreq, &got), ncclSuccess);
  EXPECT_EQ(sent, out.size());
  EXPECT_EQ(got, out.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
  EXPECT_EQ(process_stats().bytes_logical_received.load() - before, out.size());
  EXPECT_GT(process_stats().bytes_wire_received.load(), out.size());
  bool seen_send = false, seen_recv = false;
  for (const auto& p : peer_traffic()) {
    EXPECT_EQ(p.device, "lo");
    seen_send |= p.counters.bytes_logical_sent == out.size() && p.counters.messages_sent == 1;
    seen_recv |= p.counters.bytes_logical_received == out.size() && p.counters.bytes_wire_received > out.size();
  }
  EXPECT_TRUE(seen_send && seen_recv);

  void* flush = reinterpret_cast<void*>(1);
  int isizes[1] = {0};
  EXPECT_EQ(net_iflush(recv, 1, data, isizes, mhandles, &flush), ncclSuccess);
  EXPECT_EQ(flush, nullptr);
  void* two[2] = {in.data(), in.data()};
  size_t two_sizes[2] = {1, 1};
  int two_tags[2] = {0, 0};
  void* two_mh[2] = {mh, mh};
  EXPECT_EQ(net_irecv(recv, 2, two, two_sizes, two_tags, two_mh, &rreq), ncclInternalError);

  EXPECT_EQ(net_dereg_mr(send, mh), ncclSuccess);
  EXPECT_EQ(net_close_send(send), ncclSuccess);
  EXPECT_EQ(net_close_recv(recv), ncclSuccess);
  EXPECT_EQ(net_close_listen(listen), ncclSuccess);
  EXPECT_EQ(net_finalize(ctx), ncclSuccess);
}

TEST_F(Adapter, LegacyInitIsIdempotent) {
  ASSERT_EQ(net_init(nullptr), ncclSuccess);
  ASSERT_EQ(net_init(nullptr), ncclSuccess);
  EXPECT_EQ(net_state_references(), 1);
  void* ctx = nullptr;
  ASSERT_EQ(net_init_context(&ctx, 1, -1, nullptr), ncclSuccess);
  EXPECT_EQ(net_state_references(), 2);
  EXPECT_EQ(net_finalize(ctx), ncclSuccess);
  EXPECT_EQ(net_state_references(), 1);
}

}  // namespace
}  // namespace sieve::plugin
