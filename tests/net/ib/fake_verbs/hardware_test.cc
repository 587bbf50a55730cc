// SPDX-License-Identifier: Apache-2.0
// What the fake does that real ports and adapters do and a lenient fake would not: the extended
// context rdma-core always opens, several ports per device, ports that are down, MTUs below 4096,
// P_Key tables, ports that require a GRH, IB subnets, the limit of one message, EFA and iWARP
// devices, the retry timers (transport and RNR), asynchronous events, and what tests can ask it.
#include "tests/net/ib/fake_verbs/test_support.h"

namespace {

using namespace fake_verbs_test;

// The attributes of one connection's path: what a transport chooses at INIT, RTR and RTS.
struct Path {
  uint8_t port = 1;
  uint16_t pkey_index = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  bool global = false;    // IB: a GRH (RoCE always has one)
  bool routable = false;  // IB: the routable GID (index 1, with a FLID) as this end's address and sgid
  bool to_flid = false;   // IB: the DLID is the FLID in the peer's GID, not its LID
  uint8_t sl = 0;
  uint8_t traffic_class = 0;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
};

// One end: a QP on `node` bound to `path.port`, with the addresses its peer needs.
struct End {
  Node node;
  ibv_qp* qp = nullptr;
  QpInfo info;
};

// What verbs.h's inline ibv_query_port does on real rdma-core: the context's extended op.
ibv_port_attr extended_port(ibv_context* context, uint8_t port) {
  ibv_port_attr attr{};
  verbs_context* extended = verbs_get_ctx_op(context, query_port);
  EXPECT_NE(extended, nullptr);
  if (extended != nullptr) { EXPECT_EQ(extended->query_port(context, port, &attr, sizeof(attr)), 0); }
  return attr;
}

End make_end(int device_index, const Path& path, uint32_t psn) {
  End end;
  end.node = open_node(device_index);
  end.qp = make_qp(end.node);
  const ibv_port_attr port = extended_port(end.node.context, path.port);
  end.info.qpn = end.qp->qp_num;
  end.info.psn = psn;
  end.info.lid = port.lid;
  const int gid_index = (end.node.roce || path.routable) && port.gid_tbl_len > 1 ? 1 : 0;  // RoCE v2, routable IB
  EXPECT_EQ(verbs().query_gid(end.node.context, path.port, gid_index, &end.info.gid), 0);
  return end;
}

int init_on(ibv_qp* qp, const Path& path) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = path.pkey_index;
  attr.port_num = path.port;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return verbs().modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int rtr_to(const End& self, const QpInfo& remote, const Path& path) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = path.mtu;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = path.min_rnr_timer;
  attr.ah_attr.port_num = path.port;
  attr.ah_attr.sl = path.sl;
  attr.ah_attr.dlid = self.node.roce ? 0
                      : path.to_flid ? static_cast<uint16_t>(remote.gid.raw[4] << 8 | remote.gid.raw[5])
                                     : remote.lid;
  if (self.node.roce || path.global) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = self.node.roce || path.routable ? 1 : 0;
    attr.ah_attr.grh.hop_limit = 255;
    attr.ah_attr.grh.traffic_class = path.traffic_class;
  }
  return verbs().modify_qp(self.qp, &attr,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int rts_with(ibv_qp* qp, uint32_t psn, const Path& path) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = path.timeout;
  attr.retry_cnt = path.retry_cnt;
  attr.rnr_retry = path.rnr_retry;
  attr.sq_psn = psn;
  attr.max_rd_atomic = 1;
  return verbs().modify_qp(
      qp, &attr,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Connects a (on device index ia, path pa) and b (ib, pb) both ways.
struct Link {
  End a, b;
};

Link connect_link(int ia, const Path& pa, int ib, const Path& pb) {
  Link link;
  link.a = make_end(ia, pa, 100);
  link.b = make_end(ib, pb, 200);
  EXPECT_EQ(init_on(link.a.qp, pa), 0);
  EXPECT_EQ(init_on(link.b.qp, pb), 0);
  EXPECT_EQ(rtr_to(link.a, link.b.info, pa), 0);
  EXPECT_EQ(rtr_to(link.b, link.a.info, pb), 0);
  EXPECT_EQ(rts_with(link.a.qp, 100, pa), 0);
  EXPECT_EQ(rts_with(link.b.qp, 200, pb), 0);
  return link;
}

// One RDMA write with immediate a -> b (a receive posted first); the requester's completion status.
ibv_wc_status write_status(const Link& link) {
  std::vector<uint8_t> source(256, 9), target(256, 0);
  ibv_mr* src = verbs().reg_mr(link.a.node.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(link.b.node.pd, target.data(), target.size(), kWritable);
  EXPECT_EQ(post_recv(link.b.qp, 1), 0);
  EXPECT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 2, src, at(source), 256, at(target), dst->rkey, 5), 0);
  ibv_wc wc{};
  const ibv_wc_status status = poll_one(link.a.node.cq, &wc) ? wc.status : IBV_WC_GENERAL_ERR;
  if (status == IBV_WC_SUCCESS) { EXPECT_EQ(target, source); }
  return status;
}

// The next async event of `context`, or false when none is there (async_fd made non-blocking).
bool next_event(ibv_context* context, ibv_async_event* event) {
  fcntl(context->async_fd, F_SETFL, fcntl(context->async_fd, F_GETFL) | O_NONBLOCK);
  const auto give_up = std::chrono::steady_clock::now() + kCap;
  while (std::chrono::steady_clock::now() < give_up) {
    if (verbs().get_async_event(context, event) == 0) {
      verbs().ack_async_event(event);
      return true;
    }
    EXPECT_EQ(errno, EAGAIN);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

using FakeHardwareTest = FakeVerbsTest;

// ---------------------------------------------------------------------------------------------
// Contexts and ports

TEST_F(FakeHardwareTest, ContextsAreExtendedAndOnlyTheExtendedQueryReportsPortFlags) {
  setenv("FAKE_VERBS_DEVICES", "vf0:ib::200:grh_required", 1);
  Node node = open_node();
  ASSERT_NE(verbs_get_ctx(node.context), nullptr) << "rdma-core always opens a verbs_context";
  EXPECT_EQ(extended_port(node.context, 1).flags & IBV_QPF_GRH_REQUIRED, unsigned{IBV_QPF_GRH_REQUIRED});
  ibv_port_attr compat{};
  compat.flags = 0x5a;
  ASSERT_EQ(verbs().query_port(node.context, 1, reinterpret_cast<_compat_ibv_port_attr*>(&compat)), 0);
  EXPECT_EQ(compat.flags, 0x5a) << "the compat symbol fills only what every ABI version has";
}

TEST_F(FakeHardwareTest, PortsReportMtuMessageLimitAndPkeyTable) {
  setenv("FAKE_VERBS_DEVICES", "m0:ib::100:mtu=2048,pkey=ffff,pkey=8001,pkey=0002", 1);
  Node node = open_node();
  const ibv_port_attr port = extended_port(node.context, 1);
  EXPECT_EQ(port.active_mtu, IBV_MTU_2048);
  EXPECT_EQ(port.max_mtu, IBV_MTU_4096);
  EXPECT_EQ(port.max_msg_sz, 1u << 30) << "mlx5's limit";
  EXPECT_EQ(port.pkey_tbl_len, 3);
  __be16 pkey = 0;
  ASSERT_EQ(verbs().query_pkey(node.context, 1, 1, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0x8001);
  EXPECT_EQ(verbs().query_pkey(node.context, 1, 3, &pkey), -1);
  ibv_qp* qp = make_qp(node);
  Path path;
  path.pkey_index = 3;
  EXPECT_EQ(init_on(qp, path), EINVAL) << "pkey_index beyond the table";
  path.pkey_index = 2;
  EXPECT_EQ(init_on(qp, path), 0);
}

TEST_F(FakeHardwareTest, PathMtuAboveThePortsActiveMtuIsRefused) {
  setenv("FAKE_VERBS_DEVICES", "m1:roce:lo:100:mtu=1024", 1);
  Path path;
  path.mtu = IBV_MTU_2048;
  End a = make_end(0, path, 1);
  End b = make_end(0, path, 2);
  ASSERT_EQ(init_on(a.qp, path), 0);
  EXPECT_EQ(rtr_to(a, b.info, path), EINVAL);
  path.mtu = IBV_MTU_1024;
  EXPECT_EQ(rtr_to(a, b.info, path), 0);
}

TEST_F(FakeHardwareTest, EachPortOfATwoPortDeviceHasItsOwnAddressesAndCarriesTraffic) {
  setenv("FAKE_VERBS_DEVICES", "dual:ib::200:ports=2,down=2", 1);
  Node node = open_node();
  ibv_device_attr device{};
  ASSERT_EQ(verbs().query_device(node.context, &device), 0);
  EXPECT_EQ(device.phys_port_cnt, 2);
  ibv_port_attr one = extended_port(node.context, 1), two = extended_port(node.context, 2);
  EXPECT_EQ(one.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(two.state, IBV_PORT_DOWN);
  EXPECT_NE(one.lid, two.lid);
  ibv_gid g1{}, g2{};
  ASSERT_EQ(verbs().query_gid(node.context, 1, 0, &g1), 0);
  ASSERT_EQ(verbs().query_gid(node.context, 2, 0, &g2), 0);
  EXPECT_NE(std::memcmp(&g1, &g2, sizeof(g1)), 0);
  ASSERT_EQ(verbs().set_port_state("dual", 2, 1), 0);
  EXPECT_EQ(extended_port(node.context, 2).state, IBV_PORT_ACTIVE);

  Path on_one, on_two;
  on_two.port = 2;
  Link link = connect_link(0, on_one, 0, on_two);
  EXPECT_EQ(write_status(link), IBV_WC_SUCCESS);

  End stray = make_end(0, on_two, 7);
  ASSERT_EQ(init_on(stray.qp, on_two), 0);
  EXPECT_EQ(rtr_to(stray, link.a.info, on_one), EINVAL) << "ah_attr.port_num names another port than the QP's";
}

// ---------------------------------------------------------------------------------------------
// Devices the RC transport cannot use

TEST_F(FakeHardwareTest, EfaHasNoLinkLayerNoTransportTypeAndNoRcQueuePairs) {
  setenv("FAKE_VERBS_DEVICES", "efa0:efa::100", 1);
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_EQ(count, 1);
  EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_UNSPECIFIED);
  verbs().free_device_list(list);
  Node node = open_node();
  EXPECT_EQ(extended_port(node.context, 1).link_layer, IBV_LINK_LAYER_UNSPECIFIED);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = node.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 1;
  errno = 0;
  EXPECT_EQ(verbs().create_qp(node.pd, &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(FakeHardwareTest, IwarpIsEthernetWithAnotherTransportAndConnectsOnlyThroughRdmaCm) {
  setenv("FAKE_VERBS_DEVICES", "iw0:iwarp:lo:100", 1);
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  ASSERT_EQ(count, 1);
  EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IWARP);
  verbs().free_device_list(list);
  Path path;
  End a = make_end(0, path, 1);
  EXPECT_EQ(extended_port(a.node.context, 1).link_layer, IBV_LINK_LAYER_ETHERNET);
  ASSERT_EQ(init_on(a.qp, path), 0);
  EXPECT_EQ(rtr_to(a, a.info, path), EOPNOTSUPP);
}

// ---------------------------------------------------------------------------------------------
// Addressing: GRH, subnets, partitions

TEST_F(FakeHardwareTest, APortThatRequiresAGrhRefusesRtrWithoutOne) {
  setenv("FAKE_VERBS_DEVICES", "vf1:ib::200:grh_required", 1);
  Path local;
  End a = make_end(0, local, 1);
  End b = make_end(0, local, 2);
  ASSERT_EQ(init_on(a.qp, local), 0);
  EXPECT_EQ(rtr_to(a, b.info, local), EINVAL);
  Path global;
  global.global = true;
  Link link = connect_link(0, global, 0, global);
  EXPECT_EQ(write_status(link), IBV_WC_SUCCESS);
}

TEST_F(FakeHardwareTest, PeersInAnotherSubnetAreReachedOnlyWithAGrh) {
  report_mode();
  setenv("FAKE_VERBS_DEVICES", "s1:ib::100;s2:ib::100:subnet=fec0000000000002", 1);
  Path local;
  EXPECT_EQ(write_status(connect_link(0, local, 1, local)), IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(new_violations(), 1u);
  Path global;
  global.global = true;
  EXPECT_EQ(write_status(connect_link(0, global, 1, global)), IBV_WC_SUCCESS);
  EXPECT_EQ(new_violations(), 1u);
}

// Routers that forward FLIDs: across subnets a routed port is reached by the FLID its routable
// GID (index 1) carries; its LID, a LID of another subnet, reaches nothing. Inside a subnet the
// LID, as always.
TEST_F(FakeHardwareTest, AcrossSubnetsARoutedPortIsReachedByItsFlidOnly) {
  report_mode();
  setenv("FAKE_VERBS_DEVICES", "f1:ib::200:flid;f2:ib::200:flid,subnet=fec0000000000002", 1);
  Node node = open_node(0);
  ibv_port_attr port{};
  ASSERT_EQ(verbs().query_port(node.context, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);
  ASSERT_EQ(port.gid_tbl_len, 2);
  ibv_gid routable{};
  ASSERT_EQ(verbs().query_gid(node.context, 1, 1, &routable), 0);
  EXPECT_EQ(routable.raw[0], 0xfe);
  EXPECT_EQ(routable.raw[1], 0xc0);
  EXPECT_NE(routable.raw[4] << 8 | routable.raw[5], 0) << "a FLID";
  EXPECT_NE(routable.raw[4] << 8 | routable.raw[5], port.lid) << "not the LID";
  Path by_lid;
  by_lid.global = true;
  by_lid.routable = true;
  EXPECT_EQ(write_status(connect_link(0, by_lid, 1, by_lid)), IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(new_violations(), 1u);
  const uint64_t after_lid = new_violations();
  Path by_flid = by_lid;
  by_flid.to_flid = true;
  EXPECT_EQ(write_status(connect_link(0, by_flid, 1, by_flid)), IBV_WC_SUCCESS);
  EXPECT_EQ(write_status(connect_link(0, by_lid, 0, by_lid)), IBV_WC_SUCCESS) << "one subnet: by LID";
  EXPECT_EQ(new_violations(), after_lid);
  // A FLID inside its own subnet names no port there: the packets are lost, as on a fabric.
  EXPECT_EQ(write_status(connect_link(0, by_flid, 0, by_flid)), IBV_WC_RETRY_EXC_ERR) << "one subnet: no router";
}

TEST_F(FakeHardwareTest, QueuePairsInDifferentPartitionsCannotTalk) {
  report_mode();
  setenv("FAKE_VERBS_DEVICES", "pk:ib::100:pkey=ffff,pkey=8001,pkey=8002,pkey=0001", 1);
  Path full_a, full_b, limited;
  full_a.pkey_index = 1;   // 0x8001
  full_b.pkey_index = 2;   // 0x8002
  limited.pkey_index = 3;  // 0x0001: a limited member of 0x8001's partition
  EXPECT_EQ(write_status(connect_link(0, full_a, 0, full_b)), IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(new_violations(), 1u);
  EXPECT_EQ(write_status(connect_link(0, full_a, 0, limited)), IBV_WC_SUCCESS);
  EXPECT_EQ(write_status(connect_link(0, limited, 0, limited)), IBV_WC_RETRY_EXC_ERR) << "two limited members";
  EXPECT_EQ(new_violations(), 2u);
}

TEST_F(FakeHardwareTest, AMessageAboveThePortsLimitIsAViolation) {
  report_mode();
  setenv("FAKE_VERBS_DEVICES", "small:roce:lo:100:max_msg_sz=4096", 1);
  Path path;
  Link link = connect_link(0, path, 0, path);
  std::vector<uint8_t> source(8192), target(8192);
  ibv_mr* src = verbs().reg_mr(link.a.node.pd, source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = verbs().reg_mr(link.b.node.pd, target.data(), target.size(), kWritable);
  EXPECT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE, 1, src, at(source), 4097, at(target), dst->rkey), EINVAL);
  EXPECT_EQ(new_violations(), 1u);
  EXPECT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE, 2, src, at(source), 4096, at(target), dst->rkey), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(link.a.node.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

// ---------------------------------------------------------------------------------------------
// Timers and events

TEST_F(FakeHardwareTest, AFiniteRnrRetryGivesUpWhenNoReceiveIsPosted) {
  setenv("FAKE_VERBS_DEVICES", "rnr:roce:lo:100", 1);
  Path path;
  path.rnr_retry = 1;
  path.min_rnr_timer = 1;  // 0.01 ms
  Link link = connect_link(0, path, 0, path);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(link.b.node.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 1, nullptr, 0, 0, at(target), dst->rkey, 1), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(link.a.node.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_TRUE(wait_for_error_state(link.a.qp));
  EXPECT_EQ(qp_state(link.b.qp), IBV_QPS_RTS) << "the receiver is not at fault";
}

TEST_F(FakeHardwareTest, APortGoingDownIsAnAsyncEventAndRequestsRunOutOfRetries) {
  setenv("FAKE_VERBS_DEVICES", "down0:roce:lo:100", 1);
  Path path;
  path.timeout = 1;  // 8 us per try
  path.retry_cnt = 1;
  Link link = connect_link(0, path, 0, path);
  ASSERT_EQ(verbs().set_port_state("down0", 1, 0), 0);
  ibv_async_event event{};
  ASSERT_TRUE(next_event(link.a.node.context, &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(event.element.port_num, 1);
  EXPECT_EQ(extended_port(link.a.node.context, 1).state, IBV_PORT_DOWN);
  EXPECT_EQ(write_status(link), IBV_WC_RETRY_EXC_ERR);
  ASSERT_EQ(verbs().set_port_state("down0", 1, 1), 0);
  ASSERT_TRUE(next_event(link.a.node.context, &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_PORT_ACTIVE);
}

TEST_F(FakeHardwareTest, APortBackBeforeTheRetriesRunOutLosesNothing) {
  setenv("FAKE_VERBS_DEVICES", "flap0:roce:lo:100", 1);
  Path path;
  path.timeout = 20;  // about 4.3 s per try: the port is back long before
  Link link = connect_link(0, path, 0, path);
  ASSERT_EQ(verbs().set_port_state("flap0", 1, 0), 0);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(link.b.node.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  EXPECT_EQ(poll_briefly(link.a.node.cq, 20), 0) << "nothing moves through a port that is down";
  ASSERT_EQ(verbs().set_port_state("flap0", 1, 1), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(link.a.node.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(FakeHardwareTest, AFatalDeviceErrorIsAnAsyncEventAndThenNothingMoves) {
  setenv("FAKE_VERBS_DEVICES", "dead0:roce:lo:100", 1);
  Path path;
  Link link = connect_link(0, path, 0, path);
  ASSERT_EQ(verbs().device_fatal("dead0"), 0);
  ibv_async_event event{};
  ASSERT_TRUE(next_event(link.b.node.context, &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL);
  std::vector<uint8_t> target(64);
  ibv_mr* dst = verbs().reg_mr(link.b.node.pd, target.data(), target.size(), kWritable);
  ASSERT_EQ(post_write(link.a.qp, IBV_WR_RDMA_WRITE, 1, nullptr, 0, 0, at(target), dst->rkey), 0);
  EXPECT_EQ(poll_briefly(link.a.node.cq, 20), 0);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = link.a.node.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 1;
  errno = 0;
  EXPECT_EQ(verbs().create_qp(link.a.node.pd, &init), nullptr);
  EXPECT_EQ(errno, EIO);
}

TEST_F(FakeHardwareTest, ANonBlockingAsyncFdSaysEagainWhenNothingHappened) {
  Node node = open_node();
  fcntl(node.context->async_fd, F_SETFL, fcntl(node.context->async_fd, F_GETFL) | O_NONBLOCK);
  ibv_async_event event{};
  errno = 0;
  EXPECT_EQ(verbs().get_async_event(node.context, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
}

// ---------------------------------------------------------------------------------------------
// Fork safety

// Once ibv_fork_init succeeded, every page a registration touches is "don't fork": a child loses
// whatever else lives there, so registering part of a page is a bug the fake reports. Run in a
// fresh process (the death-test child re-runs only this test): fork safety must come before any
// registration, and earlier tests in this process have registered memory.
TEST_F(FakeHardwareTest, WithForkSafetyOnlyWholePagesMayBeRegistered) {
  report_mode();
  EXPECT_EXIT(
      {
        if (verbs().fork_init() != 0) _exit(2);
        Node node = open_node();
        const long page = sysconf(_SC_PAGESIZE);
        auto* pages =
            static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        const uint64_t before = verbs().violations();
        errno = 0;
        if (verbs().reg_mr(node.pd, pages + 64, 100, IBV_ACCESS_LOCAL_WRITE) != nullptr || errno != EINVAL) _exit(3);
        if (verbs().violations() != before + 1) _exit(4);
        if (verbs().reg_mr(node.pd, pages, 2 * page, IBV_ACCESS_LOCAL_WRITE) == nullptr) _exit(5);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "not whole pages");
}

// ---------------------------------------------------------------------------------------------
// What a test can ask the fake

TEST_F(FakeHardwareTest, TestsSeeQueuePairAttributesRegistrationFlagsAndPostedWork) {
  setenv("FAKE_VERBS_DEVICES", "seen:roce:lo:100", 1);
  Path path;
  path.sl = 3;
  path.traffic_class = 106;  // DSCP 26
  path.timeout = 20;
  path.retry_cnt = 5;
  Link link = connect_link(0, path, 0, path);
  std::vector<ibv_qp_attr> attrs(verbs().qp_attributes(nullptr, 0));
  ASSERT_EQ(verbs().qp_attributes(attrs.data(), static_cast<int>(attrs.size())), static_cast<int>(attrs.size()));
  const auto ours = std::find_if(attrs.begin(), attrs.end(), [&](const ibv_qp_attr& a) {
    return a.dest_qp_num == link.b.qp->qp_num && a.qp_state == IBV_QPS_RTS;
  });
  ASSERT_NE(ours, attrs.end());
  EXPECT_EQ(ours->ah_attr.sl, 3);
  EXPECT_EQ(ours->ah_attr.grh.traffic_class, 106);
  EXPECT_EQ(ours->timeout, 20);
  EXPECT_EQ(ours->retry_cnt, 5);

  // Fresh pages: earlier tests left registrations of heap memory behind.
  auto* buffer = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buffer, MAP_FAILED);
  EXPECT_EQ(verbs().mr_access(buffer), -1);
  ibv_mr* mr = verbs().reg_mr_iova2(link.a.node.pd, buffer, 4096, reinterpret_cast<uintptr_t>(buffer),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(verbs().mr_access(buffer + 100), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  EXPECT_EQ(verbs().dereg_mr(mr), 0);
  munmap(buffer, 4096);

  uint64_t requests_before = 0, bytes_before = 0, requests = 0, bytes = 0;
  verbs().posted(IBV_WR_RDMA_WRITE_WITH_IMM, &requests_before, &bytes_before);
  EXPECT_EQ(write_status(link), IBV_WC_SUCCESS);
  verbs().posted(IBV_WR_RDMA_WRITE_WITH_IMM, &requests, &bytes);
  EXPECT_EQ(requests - requests_before, 1u);
  EXPECT_EQ(bytes - bytes_before, 256u);
}

}  // namespace
