// SPDX-License-Identifier: Apache-2.0
// The fake libibverbs.so.1, driven as the transport drives it: entry points through dlopen/dlsym of
// the fake's own path, the data path through verbs.h's inline wrappers (context->ops).
#include "tests/net/ib/fake_verbs/test_support.h"

namespace {

using namespace fake_verbs_test;

// ---------------------------------------------------------------------------------------------
// Devices and addresses

TEST_F(FakeVerbsTest, TheFakeIsTheLibraryLoaded) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(verbs().get_device_list), &info), 0);
  EXPECT_STREQ(info.dli_fname, FAKE_VERBS_LIBRARY);
  EXPECT_STREQ(verbs().wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded");
  EXPECT_STREQ(verbs().event_type_str(IBV_EVENT_CQ_ERR), "CQ error");
}

TEST_F(FakeVerbsTest, UnsetVariableGivesOneRoceDeviceOnLoopback) {
  unsetenv("FAKE_VERBS_DEVICES");
  int count = -1;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(count, 1);
  EXPECT_EQ(list[1], nullptr);
  EXPECT_STREQ(verbs().get_device_name(list[0]), "fake0");
  ibv_context* context = verbs().open_device(list[0]);
  verbs().free_device_list(list);
  ASSERT_NE(context, nullptr);

  ibv_port_attr port{};
  ASSERT_EQ(verbs().query_port(context, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.active_speed, 32);  // EDR
  EXPECT_EQ(port.active_width, 2);   // 4x: 100 Gb/s
  EXPECT_EQ(port.gid_tbl_len, 2);
  EXPECT_NE(verbs().query_port(context, 2, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);

  ibv_gid_entry v1{}, v2{};
  ASSERT_EQ(verbs().query_gid_ex(context, 1, 0, &v1, 0, sizeof(v1)), 0);
  ASSERT_EQ(verbs().query_gid_ex(context, 1, 1, &v2, 0, sizeof(v2)), 0);
  EXPECT_EQ(v1.gid_type, IBV_GID_TYPE_ROCE_V1);
  EXPECT_EQ(v1.gid.raw[0], 0xfe);
  EXPECT_EQ(v1.gid.raw[1], 0x80);
  EXPECT_EQ(v2.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(v2.gid.raw[10], 0xff);
  EXPECT_EQ(v2.gid.raw[11], 0xff);
  EXPECT_EQ(v1.ndev_ifindex, if_nametoindex("lo"));
  EXPECT_EQ(v2.gid_index, 1u);
  EXPECT_NE(verbs().query_gid_ex(context, 1, 2, &v2, 0, sizeof(v2)), 0);
  ibv_gid gid{};
  ASSERT_EQ(verbs().query_gid(context, 1, 1, &gid), 0);
  EXPECT_EQ(std::memcmp(&gid, &v2.gid, sizeof(gid)), 0);
  EXPECT_EQ(verbs().close_device(context), 0);
}

TEST_F(FakeVerbsTest, EmptyVariableGivesNoDevices) {
  setenv("FAKE_VERBS_DEVICES", "", 1);
  int count = -1;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(list[0], nullptr);
  verbs().free_device_list(list);
}

TEST_F(FakeVerbsTest, TwoDevicesRoceAndIb) {
  setenv("FAKE_VERBS_DEVICES", "fa:roce:lo:200;fb:ib::400", 1);
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(count, 2);
  EXPECT_STREQ(verbs().get_device_name(list[0]), "fa");
  EXPECT_STREQ(verbs().get_device_name(list[1]), "fb");
  EXPECT_NE(verbs().get_device_guid(list[0]), verbs().get_device_guid(list[1]));
  ibv_context* roce = verbs().open_device(list[0]);
  ibv_context* ib = verbs().open_device(list[1]);
  verbs().free_device_list(list);
  ibv_port_attr port{};
  ASSERT_EQ(verbs().query_port(roce, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);
  EXPECT_EQ(port.active_speed, 64);  // HDR
  EXPECT_EQ(port.active_width, 2);   // 4x
  ASSERT_EQ(verbs().query_port(ib, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(port.active_speed, 128);  // NDR
  EXPECT_NE(port.lid, 0);
  EXPECT_EQ(port.gid_tbl_len, 1);
  ibv_gid_entry entry{};
  ASSERT_EQ(verbs().query_gid_ex(ib, 1, 0, &entry, 0, sizeof(entry)), 0);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_IB);
  EXPECT_EQ(entry.ndev_ifindex, 0u);
  EXPECT_EQ(entry.gid.global.interface_id, verbs().get_device_guid(&*ib->device));
  EXPECT_EQ(verbs().close_device(roce), 0);
  EXPECT_EQ(verbs().close_device(ib), 0);
}

TEST_F(FakeVerbsTest, BadDeviceEntriesAreRefused) {
  for (const char* bad :
       {"x:eth:lo:100", "x:roce:lo:33", "x:roce:no-such-netdev0:100", "x:roce:lo", "a:ib::100;a:ib::100"}) {
    setenv("FAKE_VERBS_DEVICES", bad, 1);
    errno = 0;
    EXPECT_EQ(verbs().get_device_list(nullptr), nullptr) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
  }
}

struct Addresses {
  ibv_gid roce_v1, roce_v2, ib_gid;
  __be64 guid;
  uint16_t lid;
};

Addresses addresses_here() {
  setenv("FAKE_VERBS_DEVICES", "r:roce:lo:100;i:ib::100", 1);
  Addresses out{};
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  if (list == nullptr || count != 2) return out;
  ibv_context* roce = verbs().open_device(list[0]);
  ibv_context* ib = verbs().open_device(list[1]);
  out.guid = verbs().get_device_guid(list[0]);
  verbs().free_device_list(list);
  verbs().query_gid(roce, 1, 0, &out.roce_v1);
  verbs().query_gid(roce, 1, 1, &out.roce_v2);
  verbs().query_gid(ib, 1, 0, &out.ib_gid);
  ibv_port_attr port{};
  verbs().query_port(ib, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port));
  out.lid = port.lid;
  verbs().close_device(roce);
  verbs().close_device(ib);
  return out;
}

TEST_F(FakeVerbsTest, AddressesAreStableInAProcessAndDifferInAnother) {
  Addresses mine = addresses_here();
  Addresses again = addresses_here();
  EXPECT_EQ(std::memcmp(&mine, &again, sizeof(mine)), 0);
  EXPECT_NE(mine.lid, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Addresses theirs = addresses_here();
    ssize_t n = write(fds[1], &theirs, sizeof(theirs));
    _exit(n == sizeof(theirs) ? 0 : 1);
  }
  close(fds[1]);  // a child that dies early then reads as end of file, not a hang
  Addresses theirs{};
  bool got = receive_value(fds[0], &theirs);
  close(fds[0]);
  EXPECT_EQ(wait_exit(child), 0);
  ASSERT_TRUE(got);
  EXPECT_NE(std::memcmp(&mine.roce_v1, &theirs.roce_v1, sizeof(ibv_gid)), 0);
  EXPECT_NE(std::memcmp(&mine.roce_v2, &theirs.roce_v2, sizeof(ibv_gid)), 0);
  EXPECT_NE(std::memcmp(&mine.ib_gid, &theirs.ib_gid, sizeof(ibv_gid)), 0);
  EXPECT_NE(mine.guid, theirs.guid);
  EXPECT_NE(mine.lid, theirs.lid);
  EXPECT_NE(theirs.lid, 0);
}

// ---------------------------------------------------------------------------------------------
// RC data path in one process

class LoopbackWriteWithImm : public FakeVerbsTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(LoopbackWriteWithImm, IsByteExact) {
  const uint32_t size = GetParam();
  Pair p = make_pair_of_qps();
  std::vector<uint8_t> source(size + 1), target(size + 64, 0xee);
  fill_pattern(source, size);
  ibv_mr* src = verbs().reg_mr(p.a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  EXPECT_NE(src->lkey, src->rkey);

  ASSERT_EQ(post_recv(p.qb, 77), 0);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, 5, src, reinterpret_cast<uintptr_t>(source.data()), size,
                       reinterpret_cast<uintptr_t>(target.data()) + 32, dst->rkey, 0xabcdef),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << verbs().wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc.qp_num, p.qa->qp_num);
  ASSERT_TRUE(poll_one(p.b.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.byte_len, size);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(wc.imm_data), 0xabcdefu);
  EXPECT_EQ(wc.qp_num, p.qb->qp_num);
  EXPECT_EQ(wc.src_qp, p.qa->qp_num);
  EXPECT_EQ(std::memcmp(target.data() + 32, source.data(), size), 0);
  auto untouched = [](uint8_t byte) { return byte == 0xee; };
  EXPECT_TRUE(std::all_of(target.begin(), target.begin() + 32, untouched)) << "written before the start";
  EXPECT_TRUE(std::all_of(target.begin() + 32 + size, target.end(), untouched)) << "written past the end";
  EXPECT_EQ(new_violations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LoopbackWriteWithImm, ::testing::Values(0u, 1u, 4097u, 64u << 20),
                         [](const ::testing::TestParamInfo<uint32_t>& param) {
                           return "Bytes" + std::to_string(param.param);
                         });

TEST_F(FakeVerbsTest, GatherListsUnsignaledInlineAndSendsCompleteInOrder) {
  Pair p = make_pair_of_qps();
  std::vector<uint8_t> source(3000), target(4096, 0), inbox(2048, 0);
  fill_pattern(source, 3);
  ibv_mr* src = verbs().reg_mr(p.a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* box = verbs().reg_mr(p.b.pd, inbox.data(), inbox.size(), IBV_ACCESS_LOCAL_WRITE);
  uintptr_t s = reinterpret_cast<uintptr_t>(source.data());
  uintptr_t t = reinterpret_cast<uintptr_t>(target.data());

  // Unsignaled write of a three-piece gather list, then an unsignaled inline write, then a signaled send.
  ibv_sge pieces[3] = {{s, 100, src->lkey}, {s + 1000, 200, src->lkey}, {s + 2000, 300, src->lkey}};
  ibv_sge inline_piece{s + 2500, 40, 0};  // lkey ignored for inline data
  ibv_sge send_piece{s, 1500, src->lkey};
  ibv_send_wr wrs[3]{};
  wrs[0].wr_id = 1;
  wrs[0].sg_list = pieces;
  wrs[0].num_sge = 3;
  wrs[0].opcode = IBV_WR_RDMA_WRITE;
  wrs[0].wr.rdma.remote_addr = t;
  wrs[0].wr.rdma.rkey = dst->rkey;
  wrs[0].next = &wrs[1];
  wrs[1].wr_id = 2;
  wrs[1].sg_list = &inline_piece;
  wrs[1].num_sge = 1;
  wrs[1].opcode = IBV_WR_RDMA_WRITE;
  wrs[1].send_flags = IBV_SEND_INLINE;
  wrs[1].wr.rdma.remote_addr = t + 600;
  wrs[1].wr.rdma.rkey = dst->rkey;
  wrs[1].next = &wrs[2];
  wrs[2].wr_id = 3;
  wrs[2].sg_list = &send_piece;
  wrs[2].num_sge = 1;
  wrs[2].opcode = IBV_WR_SEND_WITH_IMM;
  wrs[2].imm_data = htobe32(9);
  wrs[2].send_flags = IBV_SEND_SIGNALED;
  // The receive scatters over two pieces of the inbox.
  ibv_sge recv_pieces[2] = {{reinterpret_cast<uintptr_t>(inbox.data()), 1000, box->lkey},
                            {reinterpret_cast<uintptr_t>(inbox.data()) + 1024, 1000, box->lkey}};
  ibv_recv_wr recv{};
  recv.wr_id = 40;
  recv.sg_list = recv_pieces;
  recv.num_sge = 2;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(ibv_post_recv(p.qb, &recv, &bad_recv), 0);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.qa, wrs, &bad), 0);

  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u) << "only the signaled request completes";
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(poll_one(p.b.cq, &wc));
  EXPECT_EQ(wc.wr_id, 40u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 1500u);
  EXPECT_EQ(be32toh(wc.imm_data), 9u);
  // Requests complete in order, so the writes before the send have landed.
  EXPECT_EQ(std::memcmp(target.data(), source.data(), 100), 0);
  EXPECT_EQ(std::memcmp(target.data() + 100, source.data() + 1000, 200), 0);
  EXPECT_EQ(std::memcmp(target.data() + 300, source.data() + 2000, 300), 0);
  EXPECT_EQ(std::memcmp(target.data() + 600, source.data() + 2500, 40), 0);
  EXPECT_EQ(std::memcmp(inbox.data(), source.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(inbox.data() + 1024, source.data() + 1000, 500), 0);
  EXPECT_EQ(poll_briefly(p.a.cq, 5), 0);
}

TEST_F(FakeVerbsTest, SqSigAllSignalsEveryRequest) {
  Pair p = make_pair_of_qps(256, /*a_sig_all=*/1);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE, id, nullptr, 0, 0, reinterpret_cast<uintptr_t>(target.data()),
                         dst->rkey, 0, 0),
              0);
  }
  for (uint64_t id = 1; id <= 3; ++id) {
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(p.a.cq, &wc));
    EXPECT_EQ(wc.wr_id, id);
  }
}

TEST_F(FakeVerbsTest, WriteWithImmWaitsForAReceive) {
  Pair p = make_pair_of_qps();
  std::vector<uint8_t> target(16);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, 1, nullptr, 0, 0, reinterpret_cast<uintptr_t>(target.data()),
                       dst->rkey, 1),
            0);
  EXPECT_EQ(poll_briefly(p.a.cq), 0) << "no receive posted: the request must wait (RNR)";
  EXPECT_EQ(poll_briefly(p.b.cq, 5), 0);
  ASSERT_EQ(post_recv(p.qb, 2), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(poll_one(p.b.cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
}

TEST_F(FakeVerbsTest, RdmaReadFetchesRemoteBytes) {
  Pair p = make_pair_of_qps();
  std::vector<uint8_t> remote(8192), local(8192, 0);
  fill_pattern(remote, 11);
  ibv_mr* rmr = verbs().reg_mr(p.b.pd, remote.data(), remote.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* lmr = verbs().reg_mr(p.a.pd, local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_READ, 8, lmr, reinterpret_cast<uintptr_t>(local.data()), 5000,
                       reinterpret_cast<uintptr_t>(remote.data()) + 100, rmr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(local.data(), remote.data() + 100, 5000), 0);
  EXPECT_EQ(local[5000], 0);
}

TEST_F(FakeVerbsTest, DmabufRegistrationMapsTheFdAtTheIova) {
  Pair p = make_pair_of_qps();
  errno = 0;
  EXPECT_EQ(verbs().reg_dmabuf_mr(p.b.pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EBADF);

  int fd = memfd_create("fake-verbs-dmabuf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 3 * 4096), 0);
  const uint64_t iova = 0x7000000000ull;
  ibv_mr* dmabuf = verbs().reg_dmabuf_mr(p.b.pd, 4096, 8192, iova, fd,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(dmabuf, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dmabuf->addr), iova);
  EXPECT_EQ(dmabuf->length, 8192u);

  std::vector<uint8_t> source(1000);
  fill_pattern(source, 5);
  ibv_mr* src = verbs().reg_mr(p.a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(p.qb, 1), 0);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, 2, src, reinterpret_cast<uintptr_t>(source.data()), 1000,
                       iova + 10, dmabuf->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(poll_one(p.b.cq, &wc));
  std::vector<uint8_t> landed(1000);
  ASSERT_EQ(pread(fd, landed.data(), landed.size(), 4096 + 10), 1000);
  EXPECT_EQ(landed, source);
  EXPECT_EQ(verbs().dereg_mr(dmabuf), 0);
  EXPECT_EQ(verbs().dereg_mr(src), 0);
  close(fd);
}

// As rdma-core: ibv_fork_init protects only what is registered after it, so once memory has been
// registered without it, it fails with EINVAL; once it has succeeded, calling it again is fine.
TEST_F(FakeVerbsTest, ForkInitFailsOnceMemoryWasRegisteredWithoutIt) {
  auto initialized = verbs().fork_initialized;
  ASSERT_NE(initialized, nullptr);
  const bool before = initialized() == 1;  // an earlier test of this process may have called it
  Node node = open_node();
  std::vector<uint8_t> buffer(64);
  ibv_mr* mr = verbs().reg_mr(node.pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(verbs().fork_init(), before ? 0 : EINVAL);
  EXPECT_EQ(initialized() == 1, before);
  EXPECT_EQ(verbs().dereg_mr(mr), 0);
}

TEST_F(FakeVerbsTest, DestroyingObjectsInUseIsBusy) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  std::vector<uint8_t> buffer(64);
  ibv_mr* mr = verbs().reg_mr(node.pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(verbs().dealloc_pd(node.pd), EBUSY);
  EXPECT_EQ(verbs().destroy_cq(node.cq), EBUSY);
  EXPECT_EQ(verbs().dereg_mr(mr), 0);
  EXPECT_EQ(verbs().dealloc_pd(node.pd), EBUSY) << "the QP still uses the PD";
  EXPECT_EQ(verbs().destroy_qp(qp), 0);
  EXPECT_EQ(verbs().destroy_cq(node.cq), 0);
  EXPECT_EQ(verbs().dealloc_pd(node.pd), 0);
  EXPECT_EQ(verbs().close_device(node.context), 0);
  EXPECT_EQ(new_violations(), 0u);
}

TEST_F(FakeVerbsTest, WrongAttrMasksAreEinval) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  EXPECT_EQ(verbs().modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);  // no ACCESS_FLAGS
  EXPECT_EQ(verbs().modify_qp(qp, &attr,
                              IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN),
            EINVAL);  // SQ_PSN belongs to RTS
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(verbs().modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);  // RESET -> RTS skips states
  ASSERT_EQ(to_init(qp), 0);
  QpInfo self = info_of(node, qp, 1);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = IBV_MTU_4096;
  rtr.dest_qp_num = self.qpn;
  rtr.ah_attr.port_num = 1;
  rtr.ah_attr.is_global = 1;
  rtr.ah_attr.grh.dgid = self.gid;
  rtr.ah_attr.grh.sgid_index = 1;
  EXPECT_EQ(verbs().modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  EXPECT_EQ(to_rtr(node, qp, self), 0);
  EXPECT_EQ(to_rts(qp, 1), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTS);
  EXPECT_EQ(new_violations(), 0u);
}

TEST_F(FakeVerbsTest, AsyncEventWaitEndsWhenTheContextCloses) {
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_EQ(count, 1);
  ibv_context* context = verbs().open_device(list[0]);
  verbs().free_device_list(list);
  std::atomic<int> result{1};
  std::thread waiter([&] {
    ibv_async_event event{};
    result = verbs().get_async_event(context, &event);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(result.load(), 1) << "returned with no event";
  ASSERT_EQ(verbs().close_device(context), 0);
  waiter.join();
  EXPECT_EQ(result.load(), -1);
}

TEST_F(FakeVerbsTest, ManyQpsDrivenFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kPairsPerThread = 2;
  constexpr int kMessages = 100;
  constexpr uint32_t kBytes = 4096;
  std::vector<Pair> pairs;
  for (int i = 0; i < kThreads * kPairsPerThread; ++i) pairs.push_back(make_pair_of_qps());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPairsPerThread; ++k) {
        Pair& p = pairs[t * kPairsPerThread + k];
        std::vector<uint8_t> source(kBytes * kMessages), target(kBytes * kMessages, 0);
        fill_pattern(source, static_cast<uint32_t>(t * 10 + k));
        ibv_mr* src = verbs().reg_mr(p.a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
        ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), kWritable);
        int sent = 0, acked = 0, received = 0;
        constexpr int kWindow = 32;  // receives posted ahead, and requests in flight
        for (int m = 0; m < kWindow; ++m) failures += post_recv(p.qb, m) != 0;
        auto give_up = std::chrono::steady_clock::now() + kCap;
        while ((acked < kMessages || received < kMessages) && std::chrono::steady_clock::now() < give_up) {
          if (sent < kMessages && sent - acked < kWindow) {
            failures += post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, sent, src, at(source, sent * kBytes), kBytes,
                                   at(target, sent * kBytes), dst->rkey, sent) != 0;
            ++sent;
          }
          ibv_wc wc{};
          if (ibv_poll_cq(p.a.cq, 1, &wc) == 1) {
            failures += wc.status != IBV_WC_SUCCESS || wc.wr_id != static_cast<uint64_t>(acked);
            ++acked;
          }
          if (ibv_poll_cq(p.b.cq, 1, &wc) == 1) {
            failures += wc.status != IBV_WC_SUCCESS || be32toh(wc.imm_data) != static_cast<uint32_t>(received);
            ++received;
            if (received + kWindow <= kMessages) failures += post_recv(p.qb, received + kWindow) != 0;
          }
        }
        failures += acked != kMessages || received != kMessages || source != target;
        verbs().dereg_mr(src);
        verbs().dereg_mr(dst);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(new_violations(), 0u);
}

TEST_F(FakeVerbsTest, DeregisteringAnMrInUseIsRefused) {
  report_mode();
  Pair p = make_pair_of_qps();
  Buffers b;
  register_buffers(p, &b, kWritable);
  // A write-with-imm waiting for a receive keeps its source MR in use.
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, 1, b.src, at(b.source), 64, at(b.target), b.dst->rkey), 0);
  EXPECT_EQ(verbs().dereg_mr(b.src), EBUSY);
  EXPECT_EQ(new_violations(), 1u);
  ASSERT_EQ(post_recv(p.qb, 2), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(verbs().dereg_mr(b.src), 0);
}

TEST_F(FakeVerbsTest, ClosingAContextWithLiveObjectsIsRefused) {
  report_mode();
  Node node = open_node();
  errno = 0;
  EXPECT_EQ(verbs().close_device(node.context), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, AForkedChildCannotUseItsParentsObjects) {
  Node node = open_node();
  report_mode();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    uint64_t before = verbs().violations();
    bool refused = verbs().alloc_pd(node.context) == nullptr;
    ibv_wc wc;
    refused = refused && ibv_poll_cq(node.cq, 1, &wc) < 0;
    // Its own objects work.
    Node own = open_node();
    _exit(refused && verbs().violations() == before + 2 && own.cq != nullptr ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
}

int open_fds() {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) count += fcntl(fd, F_GETFD) != -1;
  return count;
}

TEST_F(FakeVerbsTest, OpeningAndClosingContextsLeaksNoDescriptors) {
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_EQ(count, 1);
  verbs().close_device(verbs().open_device(list[0]));  // the service thread's own descriptors open once
  int before = open_fds();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(verbs().close_device(verbs().open_device(list[0])), 0);
  verbs().free_device_list(list);
  EXPECT_EQ(open_fds(), before);
}

// ---------------------------------------------------------------------------------------------
// Two processes

// Runs `child` in a forked process that exchanges QpInfo with this one over pipes; returns its pid.
struct Peer {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

template <typename Body> Peer fork_peer(Body child) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    _exit(child(down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);
  return {pid, down[1], up[0]};
}

struct Target {
  QpInfo qp;
  uint64_t addr;
  uint32_t rkey;
};

// The child: one QP and a 1 MiB target; reports the pattern it finally sees (exit 0 = it matched).
int receiving_child(int from_parent, int to_parent) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  static std::vector<uint8_t> target(1 << 20, 0);
  ibv_mr* mr = verbs().reg_mr(node.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Target mine{info_of(node, qp, 700), reinterpret_cast<uintptr_t>(target.data()), mr->rkey};
  QpInfo parent;
  if (!send_value(to_parent, mine) || !receive_value(from_parent, &parent)) return 10;
  if (to_init(qp) != 0 || to_rtr(node, qp, parent) != 0 || to_rts(qp, 700) != 0) return 11;
  if (post_recv(qp, 99) != 0) return 12;
  ibv_wc wc{};
  if (!poll_one(node.cq, &wc) || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
      be32toh(wc.imm_data) != 4242 || wc.byte_len != target.size()) {
    return 13;
  }
  std::vector<uint8_t> expected(target.size());
  fill_pattern(expected, 42);
  return expected == target ? 0 : 14;
}

// This process's side: writes 1 MiB with immediate into the child's target.
void write_to_receiving_child(const Peer& peer) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  Target child;
  ASSERT_TRUE(receive_value(peer.from_child, &child));
  ASSERT_TRUE(send_value(peer.to_child, info_of(node, qp, 300)));
  bring_up(node, qp, child.qp, 300);
  std::vector<uint8_t> source(1 << 20);
  fill_pattern(source, 42);
  ibv_mr* src = verbs().reg_mr(node.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_write(qp, IBV_WR_RDMA_WRITE_WITH_IMM, 1, src, reinterpret_cast<uintptr_t>(source.data()),
                       static_cast<uint32_t>(source.size()), child.addr, child.rkey, 4242),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(node.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << verbs().wc_status_str(wc.status);
}

TEST_F(FakeVerbsTest, WriteWithImmBetweenTwoProcesses) {
  Peer peer = fork_peer(receiving_child);
  ASSERT_GT(peer.pid, 0);
  write_to_receiving_child(peer);
  EXPECT_EQ(wait_exit(peer.pid), 0) << "the child saw wrong bytes or completions";
}

// Emulated nodes live in network namespaces, where abstract sockets do not reach: socket files do.
TEST_F(FakeVerbsTest, ProcessesInDifferentNetworkNamespacesMeetThroughASocketDir) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace";
  char dir[] = "/tmp/fake-verbs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("FAKE_VERBS_SOCKET_DIR", dir, 1);
  Peer peer = fork_peer([](int from_parent, int to_parent) {
    if (unshare(CLONE_NEWNET) != 0) return 20;
    return receiving_child(from_parent, to_parent);
  });
  ASSERT_GT(peer.pid, 0);
  write_to_receiving_child(peer);
  EXPECT_EQ(wait_exit(peer.pid), 0) << "the child saw wrong bytes or completions";
  unsetenv("FAKE_VERBS_SOCKET_DIR");
  std::filesystem::remove_all(dir);
}

// The child brings its QP up, posts nothing, and exits when told to (or dies with the parent).
int vanishing_child(int from_parent, int to_parent) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  static std::vector<uint8_t> target(4096);
  ibv_mr* mr = verbs().reg_mr(node.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Target mine{info_of(node, qp, 5), reinterpret_cast<uintptr_t>(target.data()), mr->rkey};
  QpInfo parent;
  if (!send_value(to_parent, mine) || !receive_value(from_parent, &parent)) return 10;
  if (to_init(qp) != 0 || to_rtr(node, qp, parent) != 0 || to_rts(qp, 5) != 0) return 11;
  char go;
  if (!send_value(to_parent, 'r') || !receive_value(from_parent, &go)) return 12;
  return 0;
}

struct DeadPeerSetup {
  Node node;
  ibv_qp* qp = nullptr;
  Target child{};
  Peer peer;
};

void connect_to_vanishing_child(DeadPeerSetup* s) {
  s->peer = fork_peer(vanishing_child);
  ASSERT_GT(s->peer.pid, 0);
  s->node = open_node();
  s->qp = make_qp(s->node);
  ASSERT_TRUE(receive_value(s->peer.from_child, &s->child));
  ASSERT_TRUE(send_value(s->peer.to_child, info_of(s->node, s->qp, 6)));
  bring_up(s->node, s->qp, s->child.qp, 6);
  char ready;
  ASSERT_TRUE(receive_value(s->peer.from_child, &ready));
}

TEST_F(FakeVerbsTest, DeadPeerFailsOutstandingRequestsAndFlushesReceives) {
  DeadPeerSetup s;
  connect_to_vanishing_child(&s);
  ASSERT_EQ(post_recv(s.qp, 500), 0);
  // A write-with-imm to a peer with no receive posted stays outstanding (RNR)...
  ASSERT_EQ(post_write(s.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 1, nullptr, 0, 0, s.child.addr, s.child.rkey, 1), 0);
  EXPECT_EQ(poll_briefly(s.node.cq, 20), 0);
  // ...until the peer dies.
  kill(s.peer.pid, SIGKILL);
  wait_exit(s.peer.pid);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(s.node.cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << verbs().wc_status_str(wc.status);
  ASSERT_TRUE(poll_one(s.node.cq, &wc));
  EXPECT_EQ(wc.wr_id, 500u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(qp_state(s.qp), IBV_QPS_ERR);
  // Later requests flush.
  ASSERT_EQ(post_write(s.qp, IBV_WR_RDMA_WRITE, 2, nullptr, 0, 0, s.child.addr, s.child.rkey), 0);
  ASSERT_TRUE(poll_one(s.node.cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(new_violations(), 0u);
}

TEST_F(FakeVerbsTest, RequestToAPeerThatDiedIdleFailsWithRetryExceeded) {
  DeadPeerSetup s;
  connect_to_vanishing_child(&s);
  ASSERT_TRUE(send_value(s.peer.to_child, 'x'));
  EXPECT_EQ(wait_exit(s.peer.pid), 0);
  ASSERT_EQ(post_write(s.qp, IBV_WR_RDMA_WRITE, 3, nullptr, 0, 0, s.child.addr, s.child.rkey), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(s.node.cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

// ---------------------------------------------------------------------------------------------
// Violations: each aborts by default and, in report mode, behaves as hardware would.

// Posts a write that breaks the remote side's rules and returns the requester's completion status.
ibv_wc_status remote_write_status(unsigned target_access, size_t target_offset, uint32_t length, bool wrong_rkey) {
  Pair p = make_pair_of_qps();
  Buffers b;
  register_buffers(p, &b, target_access);
  uint32_t rkey = wrong_rkey ? b.dst->rkey ^ 0x5a5a00 : b.dst->rkey;
  EXPECT_EQ(post_recv(p.qb, 9), 0);
  EXPECT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE, 1, b.src, at(b.source), length, at(b.target, target_offset), rkey), 0);
  ibv_wc wc{};
  if (!poll_one(p.a.cq, &wc)) return IBV_WC_GENERAL_ERR;
  // The responder's QP goes to ERR too and flushes its receive.
  EXPECT_TRUE(wait_for_error_state(p.qb));
  ibv_wc flushed{};
  EXPECT_TRUE(poll_one(p.b.cq, &flushed));
  EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(std::count(b.target.begin(), b.target.end(), 0), static_cast<long>(b.target.size())) << "bytes landed";
  return wc.status;
}

TEST_F(FakeVerbsTest, WrongRkeyIsRemoteAccessError) {
  report_mode();
  EXPECT_EQ(remote_write_status(kWritable, 0, 64, true), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, WrongRkeyAborts) {
  EXPECT_DEATH(remote_write_status(kWritable, 0, 64, true), "fake-verbs: VIOLATION: .*rkey .*names no registered MR");
}

TEST_F(FakeVerbsTest, WriteBeyondTheMrIsRemoteAccessError) {
  report_mode();
  EXPECT_EQ(remote_write_status(kWritable, 4000, 200, false), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, WriteBeyondTheMrAborts) {
  EXPECT_DEATH(remote_write_status(kWritable, 4000, 200, false), "fake-verbs: VIOLATION: .*outside its MR");
}

TEST_F(FakeVerbsTest, WriteWithoutRemoteWriteAccessIsRemoteAccessError) {
  report_mode();
  EXPECT_EQ(remote_write_status(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0, 64, false), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(FakeVerbsTest, WriteWithoutRemoteWriteAccessAborts) {
  EXPECT_DEATH(remote_write_status(IBV_ACCESS_LOCAL_WRITE, 0, 64, false),
               "fake-verbs: VIOLATION: .*without REMOTE_WRITE");
}

TEST_F(FakeVerbsTest, ReadWithoutRemoteReadAccessIsRemoteAccessError) {
  report_mode();
  Pair p = make_pair_of_qps();
  Buffers b;
  register_buffers(p, &b, kWritable);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_READ, 1, b.src, at(b.source), 64, at(b.target), b.dst->rkey), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

// Read depth: max_rd_atomic lets a QP have reads outstanding, max_dest_rd_atomic lets its peer
// read from it; 0 (verbs' default when the mask leaves them out) refuses the read on either side.
TEST_F(FakeVerbsTest, AnRdmaReadNeedsReadDepthOnBothQueuePairs) {
  report_mode();
  Node a = open_node(0), b = open_node(0);
  ibv_qp* qa = make_qp(a);
  ibv_qp* qb = make_qp(b);
  QpInfo ia = info_of(a, qa, 100), ib = info_of(b, qb, 200);
  ASSERT_EQ(to_init(qa), 0);
  ASSERT_EQ(to_init(qb), 0);
  ASSERT_EQ(to_rtr(a, qa, ib), 0);
  ibv_qp_attr attr{};  // qb's RTR without responder read resources
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = ia.qpn;
  attr.rq_psn = ia.psn;
  attr.max_dest_rd_atomic = 0;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = ia.gid;
  attr.ah_attr.grh.sgid_index = 1;
  attr.ah_attr.grh.hop_limit = 1;
  ASSERT_EQ(verbs().modify_qp(qb, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  ASSERT_EQ(to_rts(qa, 100), 0);
  attr = ibv_qp_attr{};  // qb's RTS with no read of its own outstanding allowed
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = 200;
  attr.max_rd_atomic = 0;
  ASSERT_EQ(verbs().modify_qp(qb, &attr,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC),
            0);
  std::vector<uint8_t> ba(4096, 1), bb(4096, 2);
  const unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* ma = verbs().reg_mr(a.pd, ba.data(), ba.size(), access);
  ibv_mr* mb = verbs().reg_mr(b.pd, bb.data(), bb.size(), access);
  // qb may not issue a read at all.
  EXPECT_EQ(post_write(qb, IBV_WR_RDMA_READ, 1, mb, at(bb), 64, at(ba), ma->rkey), EINVAL);
  // qa may, but qb has no resources to answer it: invalid request.
  ASSERT_EQ(post_write(qa, IBV_WR_RDMA_READ, 2, ma, at(ba), 64, at(bb), mb->rkey), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(ba[0], 1) << "nothing was read";
}

// Hardware frees a send-queue slot only when the application polls the request's completion, or a
// later request's: an unsignaled request has none of its own, so a queue that never signals fills
// up even though every request finished (why callers signal at least once per queue depth).
TEST_F(FakeVerbsTest, SendQueueSlotsAreFreedOnlyByPollingACompletionOfThemOrALaterOne) {
  Node a = open_node(0), b = open_node(0);
  ibv_qp* qa = make_qp(a, /*send_wr=*/2);
  ibv_qp* qb = make_qp(b);
  QpInfo ia = info_of(a, qa, 100), ib = info_of(b, qb, 200);
  bring_up(a, qa, ib, 100);
  bring_up(b, qb, ia, 200);
  std::vector<uint8_t> source(4096, 7), target(4096, 0);
  ibv_mr* src = verbs().reg_mr(a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(b.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 1, src, at(source), 64, at(target), dst->rkey, 0, 0), 0);
  ASSERT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 2, src, at(source), 64, at(target, 64), dst->rkey), 0);
  // Both finish: the signaled one's completion waits in the CQ, not yet polled.
  const auto give_up = std::chrono::steady_clock::now() + kCap;
  while (target[127] != 7 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  ASSERT_EQ(target[127], 7);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the acknowledgements come back
  EXPECT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 3, src, at(source), 64, at(target, 128), dst->rkey), ENOMEM)
      << "a slot was reused before any completion was polled";
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(a.cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  // Polling the later request's completion frees the unsignaled one's slot too.
  EXPECT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 3, src, at(source), 64, at(target, 128), dst->rkey, 0, 0), 0);
  EXPECT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 4, src, at(source), 64, at(target, 192), dst->rkey), 0);
  ASSERT_TRUE(poll_one(a.cq, &wc));
  EXPECT_EQ(wc.wr_id, 4u);
}

// A local sge with a wrong lkey: the request completes with a local protection error.
ibv_wc_status local_sge_status(bool wrong_lkey) {
  Pair p = make_pair_of_qps();
  Buffers b;
  register_buffers(p, &b, kWritable);
  ibv_sge sge{at(b.source, wrong_lkey ? 0 : 4000), 200, wrong_lkey ? b.src->lkey + 1 : b.src->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 4;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = at(b.target);
  wr.wr.rdma.rkey = b.dst->rkey;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.qa, &wr, &bad), 0);
  ibv_wc wc{};
  if (!poll_one(p.a.cq, &wc)) return IBV_WC_GENERAL_ERR;
  EXPECT_EQ(wc.wr_id, 4u) << "errors complete even when unsignaled";
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
  return wc.status;
}

TEST_F(FakeVerbsTest, LocalSgeOutsideItsMrIsLocalProtectionError) {
  report_mode();
  EXPECT_EQ(local_sge_status(false), IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(local_sge_status(true), IBV_WC_LOC_PROT_ERR);
}

TEST_F(FakeVerbsTest, LocalSgeOutsideItsMrAborts) {
  EXPECT_DEATH(local_sge_status(false), "fake-verbs: VIOLATION: post_send .*does not cover the sge");
  EXPECT_DEATH(local_sge_status(true), "fake-verbs: VIOLATION: post_send .*names no registered MR");
}

// A SEND of 200 bytes into a 100-byte receive.
void oversized_send(ibv_wc* sender, ibv_wc* receiver) {
  Pair p = make_pair_of_qps();
  Buffers b;
  register_buffers(p, &b, kWritable);
  ASSERT_EQ(post_recv(p.qb, 6, b.dst, at(b.target), 100), 0);
  ASSERT_EQ(post_write(p.qa, IBV_WR_SEND, 7, b.src, at(b.source), 200, 0, 0), 0);
  ASSERT_TRUE(poll_one(p.a.cq, sender));
  ASSERT_TRUE(poll_one(p.b.cq, receiver));
}

TEST_F(FakeVerbsTest, SendLargerThanTheReceiveFailsBothSides) {
  report_mode();
  ibv_wc sender{}, receiver{};
  oversized_send(&sender, &receiver);
  EXPECT_EQ(sender.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(receiver.wr_id, 6u);
  EXPECT_EQ(receiver.status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(FakeVerbsTest, SendLargerThanTheReceiveAborts) {
  ibv_wc sender{}, receiver{};
  EXPECT_DEATH(oversized_send(&sender, &receiver),
               "fake-verbs: VIOLATION: SEND of 200 bytes .*exceeds its posted receive");
}

TEST_F(FakeVerbsTest, PostingOnAQpNotReadyIsEinval) {
  report_mode();
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  EXPECT_EQ(post_recv(qp, 1), EINVAL) << "RESET";
  ASSERT_EQ(to_init(qp), 0);
  EXPECT_EQ(post_recv(qp, 1), 0) << "receives may be posted from INIT";
  EXPECT_EQ(post_write(qp, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, 0, 0), EINVAL) << "INIT";
}

TEST_F(FakeVerbsTest, PostingOnAQpNotReadyAborts) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ASSERT_EQ(to_init(qp), 0);
  EXPECT_DEATH(post_write(qp, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, 0, 0),
               "fake-verbs: VIOLATION: post_send on QP [0-9]+ in state INIT");
}

// Three signaled writes into a CQ of two entries, nobody polling.
void overflow_cq(Pair* p) {
  *p = make_pair_of_qps(/*cqe=*/2);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(p->b.pd, target.data(), target.size(), kWritable);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(post_write(p->qa, IBV_WR_RDMA_WRITE, id, nullptr, 0, 0, at(target), dst->rkey), 0);
  }
}

TEST_F(FakeVerbsTest, CqOverflowIsAnAsyncCqError) {
  report_mode();
  Pair p;
  overflow_cq(&p);
  pollfd ready{p.a.context->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 10000), 1) << "no async event within the cap";
  ibv_async_event event{};
  ASSERT_EQ(verbs().get_async_event(p.a.context, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(event.element.cq, p.a.cq);
  verbs().ack_async_event(&event);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, CqOverflowAborts) {
  EXPECT_DEATH(
      {
        Pair p;
        overflow_cq(&p);
        poll_briefly(p.b.cq, 5000);
      },
      "fake-verbs: VIOLATION: CQ overflow");
}

TEST_F(FakeVerbsTest, UsingDestroyedObjectsIsRefused) {
  report_mode();
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ASSERT_EQ(verbs().destroy_qp(qp), 0);
  EXPECT_EQ(post_recv(qp, 1), EINVAL);
  EXPECT_EQ(verbs().destroy_qp(qp), EINVAL);
  ASSERT_EQ(verbs().destroy_cq(node.cq), 0);
  ibv_wc wc;
  EXPECT_LT(ibv_poll_cq(node.cq, 1, &wc), 0);
}

TEST_F(FakeVerbsTest, UsingDestroyedObjectsAborts) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ASSERT_EQ(verbs().destroy_qp(qp), 0);
  EXPECT_DEATH(post_write(qp, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, 0, 0),
               "fake-verbs: VIOLATION: post_send on destroyed QP");
  ASSERT_EQ(verbs().destroy_cq(node.cq), 0);
  ibv_wc wc;
  EXPECT_DEATH(ibv_poll_cq(node.cq, 1, &wc), "fake-verbs: VIOLATION: poll_cq on destroyed CQ");
}

// Connects a -> b with a's sq_psn off by one from b's rq_psn, and writes.
ibv_wc_status psn_mismatch_status() {
  Pair p;
  p.a = open_node();
  p.b = open_node();
  p.qa = make_qp(p.a);
  p.qb = make_qp(p.b);
  bring_up(p.a, p.qa, info_of(p.b, p.qb, 200), /*my_psn=*/101);
  bring_up(p.b, p.qb, info_of(p.a, p.qa, 100), 200);  // b expects 100
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), kWritable);
  EXPECT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  ibv_wc wc{};
  return poll_one(p.a.cq, &wc) ? wc.status : IBV_WC_GENERAL_ERR;
}

TEST_F(FakeVerbsTest, PsnMismatchIsRetryExceeded) {
  report_mode();
  EXPECT_EQ(psn_mismatch_status(), IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, PsnMismatchAborts) {
  EXPECT_DEATH(psn_mismatch_status(), "fake-verbs: VIOLATION: PSN mismatch: QP [0-9]+'s sq_psn is 101");
}

// a -> b, but b's RTR names another QP (c) as its peer.
ibv_wc_status pairing_mismatch_status() {
  Node a = open_node(), b = open_node();
  ibv_qp* qa = make_qp(a);
  ibv_qp* qb = make_qp(b);
  ibv_qp* qc = make_qp(a);
  bring_up(a, qa, info_of(b, qb, 200), 100);
  bring_up(b, qb, info_of(a, qc, 100), 200);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(b.pd, target.data(), target.size(), kWritable);
  EXPECT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  ibv_wc wc{};
  return poll_one(a.cq, &wc) ? wc.status : IBV_WC_GENERAL_ERR;
}

TEST_F(FakeVerbsTest, QpPairingMismatchIsRetryExceeded) {
  report_mode();
  EXPECT_EQ(pairing_mismatch_status(), IBV_WC_RETRY_EXC_ERR);
}

TEST_F(FakeVerbsTest, QpPairingMismatchAborts) {
  EXPECT_DEATH(pairing_mismatch_status(), "fake-verbs: VIOLATION: QP pairing");
}

TEST_F(FakeVerbsTest, DestQpThatNeverExistedIsReported) {
  report_mode();
  Node a = open_node();
  ibv_qp* qa = make_qp(a);
  QpInfo nobody = info_of(a, qa, 1);
  nobody.qpn = 0xfffff0;
  bring_up(a, qa, nobody, 1);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(a.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, RtrAddressMustNameAFakePortOfTheRightType) {
  report_mode();
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ASSERT_EQ(to_init(qp), 0);
  QpInfo bogus = info_of(node, qp, 1);
  bogus.gid.raw[0] = 0x20;  // some global address no fake port has
  EXPECT_EQ(to_rtr(node, qp, bogus), EINVAL);
  QpInfo v1 = info_of(node, qp, 1, /*gid_index=*/0);
  EXPECT_EQ(to_rtr(node, qp, v1, /*gid_index=*/1), EINVAL) << "a RoCE v1 dgid from a v2 sgid";
  EXPECT_EQ(to_rtr(node, qp, v1, 0), 0);
}

TEST_F(FakeVerbsTest, RtrAddressMismatchAborts) {
  Node node = open_node();
  ibv_qp* qp = make_qp(node);
  ASSERT_EQ(to_init(qp), 0);
  QpInfo bogus = info_of(node, qp, 1);
  bogus.gid.raw[0] = 0x20;
  EXPECT_DEATH(to_rtr(node, qp, bogus), "fake-verbs: VIOLATION: GID mismatch");
}

TEST_F(FakeVerbsTest, IbQpsTalkByLidAndRefuseAZeroLid) {
  report_mode();
  setenv("FAKE_VERBS_DEVICES", "ib0:ib::200", 1);
  Pair p = make_pair_of_qps();
  ASSERT_FALSE(p.a.roce);
  std::vector<uint8_t> source(100, 7), target(100, 0);
  ibv_mr* src = verbs().reg_mr(p.a.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(p.b.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_recv(p.qb, 1), 0);
  ASSERT_EQ(post_write(p.qa, IBV_WR_RDMA_WRITE_WITH_IMM, 2, src, at(source), 100, at(target), dst->rkey, 3), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(p.a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(poll_one(p.b.cq, &wc));
  EXPECT_EQ(wc.slid, p.a.lid);
  EXPECT_EQ(target, source);

  ibv_qp* other = make_qp(p.a);
  ASSERT_EQ(to_init(other), 0);
  QpInfo zero = info_of(p.b, p.qb, 1);
  zero.lid = 0;
  EXPECT_EQ(to_rtr(p.a, other, zero), EINVAL);
}

// Two IB devices; b's RTR names its own LID instead of a's.
ibv_wc_status lid_mismatch_status() {
  setenv("FAKE_VERBS_DEVICES", "ia:ib::100;ib:ib::100", 1);
  Node a = open_node(0), b = open_node(1);
  EXPECT_NE(a.lid, b.lid);
  ibv_qp* qa = make_qp(a);
  ibv_qp* qb = make_qp(b);
  QpInfo wrong_a = info_of(a, qa, 100);
  wrong_a.lid = b.lid;
  bring_up(a, qa, info_of(b, qb, 200), 100);
  bring_up(b, qb, wrong_a, 200);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(b.pd, target.data(), target.size(), kWritable);
  EXPECT_EQ(post_write(qa, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  ibv_wc wc{};
  return poll_one(a.cq, &wc) ? wc.status : IBV_WC_GENERAL_ERR;
}

TEST_F(FakeVerbsTest, LidMismatchIsRetryExceeded) {
  report_mode();
  EXPECT_EQ(lid_mismatch_status(), IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(new_violations(), 1u);
}

TEST_F(FakeVerbsTest, LidMismatchAborts) {
  EXPECT_DEATH(lid_mismatch_status(), "fake-verbs: VIOLATION: LID mismatch: QP [0-9]+'s RTR dlid is");
}

}  // namespace
