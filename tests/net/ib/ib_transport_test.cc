// SPDX-License-Identifier: Apache-2.0
// The verbs transport through the internal interface, both ends in this process, over the fake
// libibverbs (see ib_test_support.h): the data path, its limits, its errors and closing.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using namespace ib_test;

// NCCL's IB transport does the same: buffers registered later stay safe when the job forks
// (DataLoader workers) on kernels that do not protect registered pages themselves.
TEST_F(IbTransportTest, VerbsAreMadeForkSafeBeforeAnyBufferIsRegistered) {
  ASSERT_NO_FATAL_FAILURE(connect());
  EXPECT_EQ(fake::fork_initialized(), 1);
  std::vector<unsigned char> buffer(4096);
  std::unique_ptr<MemoryRegion> region;
  Status st = pair_.send->register_memory({buffer.data(), buffer.size(), -1, 0}, &region);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(fake::fork_initialized(), 1);  // the registration did not come first
}

// Fork safety marks every page a registration touches "don't fork" (on kernels before 5.13 a forked
// child then has no copy of them): the fake refuses registrations of part of a page. Sieve's own
// control buffers own their pages, and a buffer NCCL hands in is registered page-rounded, as NCCL
// does, so nothing is registered that the registration does not say it pins.
TEST_F(IbTransportTest, RegistrationsCoverWholePagesSoForkSafetyTakesNothingUnsaid) {
  ASSERT_NO_FATAL_FAILURE(connect());
  ASSERT_EQ(fake::fork_initialized(), 1);
  std::vector<unsigned char> heap(3 * 4096);
  unsigned char* odd = heap.data() + 100;  // neither start nor end on a page boundary
  auto region = reg_send(odd, 5000);
  ASSERT_NE(region, nullptr);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  EXPECT_NE(fake::mr_access(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(odd) & ~(page - 1))), -1);
  roundtrip(5000, 5000, 77);
}

TEST_F(IbTransportTest, SizesFromZeroTo64MiBArriveByteExactIntoLargerReceives) {
  ASSERT_NO_FATAL_FAILURE(connect());
  const size_t sizes[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 16u << 20, 64u << 20};
  uint32_t seed = 1;
  for (size_t size : sizes) {
    roundtrip(size, size, seed++);
    roundtrip(size, size + 4099, seed++);
  }
}

TEST_F(IbTransportTest, ThirtyTwoOutstandingEachWayAndTheThirtyThirdWaits) {
  ASSERT_NO_FATAL_FAILURE(connect());
  constexpr int kCount = kMaxRequests;
  constexpr size_t kSize = 70000;
  std::vector<std::vector<unsigned char>> out(kCount), in(kCount);
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  std::vector<Request*> sends(kCount), recvs(kCount);
  for (int i = 0; i < kCount; ++i) {
    out[i] = pattern(kSize - i, 100 + i);
    in[i].assign(kSize, kCanary);
    regions.push_back(reg_send(out[i].data(), out[i].size()));
    regions.push_back(reg_recv(in[i].data(), in[i].size()));
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(pair_.recv->irecv(in[i].data(), kSize, &recvs[i]).ok());
    ASSERT_NE(recvs[i], nullptr) << "irecv " << i;
  }
  Request* extra = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(pair_.recv->irecv(in[0].data(), kSize, &extra).ok());
  EXPECT_EQ(extra, nullptr) << "a 33rd receive must wait for a free slot";
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(pair_.send->isend(out[i].data(), out[i].size(), &sends[i]).ok());
    ASSERT_NE(sends[i], nullptr) << "isend " << i;
  }
  extra = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(pair_.send->isend(out[0].data(), 1, &extra).ok());
  EXPECT_EQ(extra, nullptr) << "a 33rd send must wait for a free slot";
  for (int i = 0; i < kCount; ++i) {
    Completion cs, cr;
    Status st = testing::wait_both(sends[i], &cs, recvs[i], &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cr.size, out[i].size());
    EXPECT_TRUE(same_bytes(in[i].data(), out[i].data(), out[i].size())) << "message " << i;
  }
}

TEST_F(IbTransportTest, SendLargerThanItsReceiveFailsBothSidesWithoutOverflowAndTheCommGoesOn) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> out = pattern(1 << 20, 5);
  std::vector<unsigned char> in((1 << 20) + 4096, kCanary);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), 4096, &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion cr, cs;
  Status sent = testing::wait(s, &cs);
  Status received = testing::wait(r, &cr);
  EXPECT_EQ(sent.code(), Code::kInvalidUsage) << sent.message();
  EXPECT_NE(sent.message().find("1048576"), std::string::npos) << sent.message();
  EXPECT_NE(sent.message().find("4096"), std::string::npos) << sent.message();
  EXPECT_EQ(received.code(), Code::kInvalidUsage) << received.message();
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], kCanary) << "byte " << i << " was written";
  // Both sides counted the refused message the same way: the next one arrives intact.
  roundtrip(3000, 4096, 6);
}

TEST_F(IbTransportTest, SeveralQueuePairsCarryLargeAndSmallMessagesInterleaved) {
  ASSERT_NO_FATAL_FAILURE(connect(4));
  const size_t sizes[] = {4096, 8u << 20, 100, (1u << 20) + 5, 0, 3u << 20};
  std::vector<std::vector<unsigned char>> out, in;
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  std::vector<Request*> sends, recvs;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    out.push_back(pattern(sizes[i], 40 + i));
    in.emplace_back(sizes[i] + 512, kCanary);
  }
  for (size_t i = 0; i < std::size(sizes); ++i) {
    regions.push_back(reg_send(out[i].data(), out[i].size()));
    regions.push_back(reg_recv(in[i].data(), in[i].size()));
    Request* r = nullptr;
    ASSERT_TRUE(pair_.recv->irecv(in[i].data(), in[i].size(), &r).ok());
    recvs.push_back(r);
  }
  for (size_t i = 0; i < std::size(sizes); ++i) {
    Request* s = nullptr;
    ASSERT_TRUE(pair_.send->isend(out[i].data(), out[i].size(), &s).ok());
    sends.push_back(s);
  }
  for (size_t i = 0; i < std::size(sizes); ++i) {
    Completion cs, cr;
    Status st = testing::wait_both(sends[i], &cs, recvs[i], &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(cr.size, sizes[i]);
    EXPECT_TRUE(same_bytes(in[i].data(), out[i].data(), sizes[i])) << "message " << i;
    for (size_t b = sizes[i]; b < in[i].size(); ++b) ASSERT_EQ(in[i][b], kCanary) << "message " << i;
  }
}

TEST_F(IbTransportTest, UnregisteredBuffersAreInvalidUsageNamingRegistration) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> buffer(8192);
  Request* r = nullptr;
  Status st = pair_.send->isend(buffer.data(), buffer.size(), &r);
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("registered"), std::string::npos) << st.message();
  EXPECT_EQ(r, nullptr);
  st = pair_.recv->irecv(buffer.data(), buffer.size(), &r);
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_EQ(r, nullptr);
  // A registration that covers only part of the buffer is no registration for all of it.
  auto part = reg_send(buffer.data(), 4096);
  st = pair_.send->isend(buffer.data(), buffer.size(), &r);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  // Zero bytes need no memory at all.
  roundtrip(0, 0, 9);
}

TEST_F(IbTransportTest, AnErrorCompletionFailsTheCommNamingThePeer) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> out = pattern(65536, 11);
  std::vector<unsigned char> in(65536, kCanary);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  // The receive announced its key; deregistering now makes the sender's write use a dead key.
  recv_region.reset();
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion cs;
  Status st = testing::wait(s, &cs);
  ASSERT_FALSE(st.ok()) << "a write with a deregistered key completed";
  EXPECT_EQ(st.code(), Code::kSystemError) << st.message();
  EXPECT_NE(st.message().find("remote access error (status 10) on queue pair "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(" to " + pair_.send->peer() + " ("), std::string::npos) << st.message();
  // The failure stays: the comm refuses further work with the same error.
  Request* again = nullptr;
  Status next = pair_.send->isend(out.data(), out.size(), &again);
  EXPECT_EQ(next.code(), Code::kSystemError);
  EXPECT_EQ(again, nullptr);
  ++violations_before_;  // the one violation this test provokes on purpose
}

TEST_F(IbTransportTest, ClosingTheSenderGivesAWaitingReceiverAnErrorNamingThePeer) {
  ASSERT_NO_FATAL_FAILURE(connect());
  std::vector<unsigned char> in(4096);
  auto recv_region = reg_recv(in.data(), in.size());
  Request* r = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  const std::string peer = pair_.recv->peer();
  pair_.send.reset();
  Completion cr;
  Status st = testing::wait(r, &cr);
  // Whichever notices first: the closed liveness socket, or the announcement the peer's queue pair
  // no longer answers (retry counter exceeded); either names the peer.
  EXPECT_TRUE(st.code() == Code::kRemoteError || st.code() == Code::kSystemError) << st.message();
  EXPECT_NE(st.message().find(peer), std::string::npos) << st.message();
}

// NCCL may close comms with requests outstanding (an aborted communicator): no crash, no verbs
// rule broken (the fake counts a queue pair destroyed under the wrong order, a registration
// dropped under a queued write), whichever side goes first.
TEST_F(IbTransportTest, ClosingCommsWithRequestsInFlightIsClean) {
  for (const bool sender_first : {true, false}) {
    ASSERT_NO_FATAL_FAILURE(connect());
    constexpr int kCount = 4;
    constexpr size_t kSize = 4u << 20;
    std::vector<std::vector<unsigned char>> out(kCount), in(kCount);
    std::vector<std::unique_ptr<MemoryRegion>> regions;
    for (int i = 0; i < kCount; ++i) {
      out[i] = pattern(kSize, 80 + i);
      in[i].resize(kSize);
      regions.push_back(reg_send(out[i].data(), kSize));
      regions.push_back(reg_recv(in[i].data(), kSize));
      Request *r = nullptr, *s = nullptr;
      ASSERT_TRUE(pair_.recv->irecv(in[i].data(), kSize, &r).ok());
      ASSERT_TRUE(pair_.send->isend(out[i].data(), kSize, &s).ok());
      Completion c;
      ASSERT_TRUE(s->test(&c).ok());
    }
    if (sender_first) {
      pair_.send.reset();
      pair_.recv.reset();
    } else {
      pair_.recv.reset();
      pair_.send.reset();
    }
    regions.clear();  // NCCL deregisters after closing
  }
}

TEST_F(IbTransportTest, FlushReadsBackADmaBufRegionAndSkipsHostMemory) {
  ASSERT_NO_FATAL_FAILURE(connect());
  const auto& device = transport_->devices()[0];
  // The fake registers dma-buf regions: a probe that misses it is a bug, not a reason to skip.
  ASSERT_TRUE(device.dmabuf) << "the dma-buf probe missed the fake's ibv_reg_dmabuf_mr";
  const size_t size = 1 << 20;
  const int fd = memfd_create("sieve-ib-flush", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, size), 0);
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  std::unique_ptr<MemoryRegion> dmabuf;
  Status st = pair_.recv->register_memory({mapped, size, fd, 0}, &dmabuf);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<unsigned char> out = pattern(size / 2, 21);
  auto send_region = reg_send(out.data(), out.size());
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(mapped, size, &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  Completion cs, cr;
  st = testing::wait_both(s, &cs, r, &cr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(std::memcmp(mapped, out.data(), out.size()), 0);
  Request* flush = nullptr;
  st = pair_.recv->flush(mapped, cr.size, dmabuf.get(), &flush);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_NE(flush, nullptr) << "device memory must be flushed";
  Completion cf;
  st = testing::wait(flush, &cf);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_FALSE(cf.message) << "a flush is not a message";
  EXPECT_EQ(fake::connected_qps().size(), 3u) << "the flush made no queue pair of its own";
  std::vector<unsigned char> host(4096);
  auto host_region = reg_recv(host.data(), host.size());
  flush = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(pair_.recv->flush(host.data(), host.size(), host_region.get(), &flush).ok());
  EXPECT_EQ(flush, nullptr) << "host memory has nothing to flush";
  dmabuf.reset();
  munmap(mapped, size);
  close(fd);
}

// A fake /sys holding what a GPU peer-memory client creates (or nothing), removed afterwards.
class FakeSysfs {
 public:
  explicit FakeSysfs(const std::string& file) {
    char path[] = "/tmp/sieve-sysfs-XXXXXX";
    if (mkdtemp(path)) root_ = path;
    if (file.empty() || root_.empty()) return;
    std::filesystem::create_directories(std::filesystem::path(root_ + file).parent_path());
    std::ofstream(root_ + file) << "1.0\n";
  }
  ~FakeSysfs() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// Without dma-buf (older kernels and drivers), GPUDirect RDMA goes through a peer-memory client
// that lets ibv_reg_mr take a CUDA pointer. NCCL's IB transport then reports NCCL_PTR_CUDA; without
// it NCCL stages every GPU byte through host memory (twice across the root complex).
TEST_F(IbTransportTest, WithNvidiaPeermemLoadedCudaPointersAreRegisteredAndFlushed) {
  for (const char* file : {"/module/nvidia_peermem/version", "/kernel/mm/memory_peers/nv_mem/version"}) {
    FakeSysfs sysfs(file);
    TransportOptions o = ib_options();
    o.topology.sysfs_root = sysfs.root();
    pair_ = testing::Pair{};
    ASSERT_NO_FATAL_FAILURE(connect(o));
    EXPECT_TRUE(transport_->devices()[0].cuda_pointers) << file;
    // The fake has no GPU: page-aligned host memory stands in for the device buffer.
    const size_t size = 1 << 20;
    void* gpu = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(gpu, MAP_FAILED);
    MemoryDescriptor device_memory{gpu, size, -1, 0};
    device_memory.cuda = true;
    std::unique_ptr<MemoryRegion> region;
    Status st = pair_.recv->register_memory(device_memory, &region);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<unsigned char> out = pattern(size / 4, 23);
    auto send_region = reg_send(out.data(), out.size());
    Request *r = nullptr, *s = nullptr;
    ASSERT_TRUE(pair_.recv->irecv(gpu, size, &r).ok());
    ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
    Completion cs, cr;
    st = testing::wait_both(s, &cs, r, &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(std::memcmp(gpu, out.data(), out.size()), 0);
    Request* flush = nullptr;
    st = pair_.recv->flush(gpu, cr.size, region.get(), &flush);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_NE(flush, nullptr) << "GPU memory must be flushed";
    Completion cf;
    EXPECT_TRUE(testing::wait(flush, &cf).ok());
    region.reset();
    send_region.reset();
    munmap(gpu, size);
  }
  FakeSysfs none("");
  TransportOptions o = ib_options();
  o.topology.sysfs_root = none.root();
  std::unique_ptr<Transport> without;
  ASSERT_TRUE(Transport::create_ib(o, &without).ok());
  EXPECT_FALSE(without->devices()[0].cuda_pointers) << "no peer-memory client, no CUDA pointers";
}

// Creating and connecting a queue pair takes a round of firmware commands: where the device takes
// GPU memory, the receive comm's flush queue pair is made with the connection, not by the first
// flush inside NCCL's data path.
TEST_F(IbTransportTest, TheFlushQueuePairIsConnectedAtSetUpNotByTheFirstFlush) {
  ASSERT_NO_FATAL_FAILURE(connect());
  ASSERT_TRUE(transport_->devices()[0].dmabuf) << "the dma-buf probe missed the fake's ibv_reg_dmabuf_mr";
  const auto qps = fake::connected_qps();
  ASSERT_EQ(qps.size(), 3u) << "the connection's two queue pairs and the receiver's flush queue pair";
  roundtrip(1000, 1000, 22);
}

// One work request carries at most the port's max_msg_sz (mlx5: 1 GiB); a larger message is refused
// at isend, naming the limit NCCL was given as maxP2pBytes, instead of failing on the wire.
TEST_F(IbTransportTest, AMessageAboveThePortsLimitIsRefusedNamingIt) {
  ASSERT_NO_FATAL_FAILURE(connect());
  EXPECT_EQ(transport_->devices()[0].max_message_bytes, uint64_t(1) << 30);
  static char byte;
  Request* s = nullptr;
  Status st = pair_.send->isend(&byte, (size_t(1) << 30) + 1, &s);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("carries at most 1073741824 bytes"), std::string::npos) << st.message();
  EXPECT_EQ(s, nullptr);
}

// One side on verbs, the other on TCP: refused at once with the variable to fix, never a wait for
// data sockets (or queue pairs) that will not come.
TEST(IbTransportMismatch, TcpAndVerbsPeersRefuseEachOtherNamingSieveTransport) {
  std::unique_ptr<Transport> verbs, tcp;
  Status st = Transport::create_ib(ib_options(), &verbs);
  ASSERT_TRUE(st.ok()) << st.message();
  tcp = testing::make_transport(testing::loopback_options());
  ASSERT_NE(tcp, nullptr);
  for (const bool verbs_listens : {true, false}) {
    Transport& listener_side = verbs_listens ? *verbs : *tcp;
    Transport& connector_side = verbs_listens ? *tcp : *verbs;
    testing::Pair pair;
    st = testing::connect_pair(listener_side, connector_side, &pair);
    EXPECT_FALSE(st.ok()) << (verbs_listens ? "tcp -> verbs" : "verbs -> tcp") << " connected";
    EXPECT_NE(st.message().find("SIEVE_TRANSPORT"), std::string::npos) << st.message();
  }
}

TEST(IbTransportOptions, OutOfRangeQueuePairCountIsRefusedNamingTheVariable) {
  std::unique_ptr<Transport> t;
  Status st = Transport::create_ib(ib_options(17), &t);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("SIEVE_IB_QPS"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sieve::net
