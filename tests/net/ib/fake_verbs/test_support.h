// SPDX-License-Identifier: Apache-2.0
// What the fake's own tests share: every entry point loaded from the fake (the test is never linked
// against a libibverbs), the data path through verbs.h's inline wrappers (context->ops), and helpers
// that open devices, connect QPs and post work.
#pragma once

#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace fake_verbs_test {

// Every entry point, from the fake: the test is never linked against a libibverbs.
struct Verbs {
  decltype(&ibv_get_device_list) get_device_list;
  decltype(&ibv_free_device_list) free_device_list;
  decltype(&ibv_get_device_name) get_device_name;
  decltype(&ibv_get_device_guid) get_device_guid;
  decltype(&ibv_open_device) open_device;
  decltype(&ibv_close_device) close_device;
  decltype(&ibv_query_device) query_device;
  decltype(&ibv_query_port) query_port;
  decltype(&ibv_query_gid) query_gid;
  decltype(&_ibv_query_gid_ex) query_gid_ex;
  decltype(&ibv_alloc_pd) alloc_pd;
  decltype(&ibv_dealloc_pd) dealloc_pd;
  decltype(&ibv_reg_mr) reg_mr;
  decltype(&ibv_reg_mr_iova2) reg_mr_iova2;
  decltype(&ibv_reg_dmabuf_mr) reg_dmabuf_mr;
  decltype(&ibv_dereg_mr) dereg_mr;
  decltype(&ibv_create_cq) create_cq;
  decltype(&ibv_destroy_cq) destroy_cq;
  decltype(&ibv_create_qp) create_qp;
  decltype(&ibv_modify_qp) modify_qp;
  decltype(&ibv_query_qp) query_qp;
  decltype(&ibv_destroy_qp) destroy_qp;
  decltype(&ibv_wc_status_str) wc_status_str;
  decltype(&ibv_event_type_str) event_type_str;
  decltype(&ibv_fork_init) fork_init;
  decltype(&ibv_get_async_event) get_async_event;
  decltype(&ibv_ack_async_event) ack_async_event;
  decltype(&ibv_query_pkey) query_pkey;
  // Only the fake has these (test_hooks.cc).
  uint64_t (*violations)();
  int (*fork_initialized)();
  int (*qp_attributes)(ibv_qp_attr* out, int capacity);
  int (*mr_access)(const void* address);
  void (*posted)(int opcode, uint64_t* requests, uint64_t* bytes);
  int (*set_port_state)(const char* device, int port, int active);
  int (*device_fatal)(const char* device);
};

template <typename T> void load(void* handle, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(handle, name));
  ASSERT_NE(*out, nullptr) << name << " missing from the fake";
}

inline const Verbs& verbs() {
  static Verbs api = [] {
    Verbs v{};
    void* handle = dlopen(FAKE_VERBS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      ADD_FAILURE() << dlerror();
      return v;
    }
    load(handle, "ibv_get_device_list", &v.get_device_list);
    load(handle, "ibv_free_device_list", &v.free_device_list);
    load(handle, "ibv_get_device_name", &v.get_device_name);
    load(handle, "ibv_get_device_guid", &v.get_device_guid);
    load(handle, "ibv_open_device", &v.open_device);
    load(handle, "ibv_close_device", &v.close_device);
    load(handle, "ibv_query_device", &v.query_device);
    load(handle, "ibv_query_port", &v.query_port);
    load(handle, "ibv_query_gid", &v.query_gid);
    load(handle, "_ibv_query_gid_ex", &v.query_gid_ex);
    load(handle, "ibv_alloc_pd", &v.alloc_pd);
    load(handle, "ibv_dealloc_pd", &v.dealloc_pd);
    load(handle, "ibv_reg_mr", &v.reg_mr);
    load(handle, "ibv_reg_mr_iova2", &v.reg_mr_iova2);
    load(handle, "ibv_reg_dmabuf_mr", &v.reg_dmabuf_mr);
    load(handle, "ibv_dereg_mr", &v.dereg_mr);
    load(handle, "ibv_create_cq", &v.create_cq);
    load(handle, "ibv_destroy_cq", &v.destroy_cq);
    load(handle, "ibv_create_qp", &v.create_qp);
    load(handle, "ibv_modify_qp", &v.modify_qp);
    load(handle, "ibv_query_qp", &v.query_qp);
    load(handle, "ibv_destroy_qp", &v.destroy_qp);
    load(handle, "ibv_wc_status_str", &v.wc_status_str);
    load(handle, "ibv_event_type_str", &v.event_type_str);
    load(handle, "ibv_fork_init", &v.fork_init);
    load(handle, "ibv_get_async_event", &v.get_async_event);
    load(handle, "ibv_ack_async_event", &v.ack_async_event);
    load(handle, "ibv_query_pkey", &v.query_pkey);
    // Only the fake has these: proof that the real libibverbs was not the one loaded.
    load(handle, "fake_verbs_violations", &v.violations);
    load(handle, "fake_verbs_fork_initialized", &v.fork_initialized);
    load(handle, "fake_verbs_qp_attributes", &v.qp_attributes);
    load(handle, "fake_verbs_mr_access", &v.mr_access);
    load(handle, "fake_verbs_posted", &v.posted);
    load(handle, "fake_verbs_set_port_state", &v.set_port_state);
    load(handle, "fake_verbs_device_fatal", &v.device_fatal);
    return v;
  }();
  return api;
}

constexpr auto kCap = std::chrono::seconds(10);  // a hang fails the test; nothing is timed

// Polls until one completion arrives; fails the test (and returns false) past kCap.
inline bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  auto give_up = std::chrono::steady_clock::now() + kCap;
  while (std::chrono::steady_clock::now() < give_up) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) {
      ADD_FAILURE() << "poll_cq failed";
      return false;
    }
    if (n == 1) return true;
    std::this_thread::yield();
  }
  ADD_FAILURE() << "no completion within the cap";
  return false;
}

// Polls a few times and returns how many completions showed up (for "nothing yet" checks).
inline int poll_briefly(ibv_cq* cq, int rounds = 200) {
  int seen = 0;
  ibv_wc wc;
  for (int i = 0; i < rounds; ++i) {
    seen += ibv_poll_cq(cq, 1, &wc);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return seen;
}

struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
};

// One opened device with a PD and a CQ.
struct Node {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  bool roce = true;
  uint16_t lid = 0;
};

inline Node open_node(int index = 0, int cqe = 256) {
  Node node;
  int count = 0;
  ibv_device** list = verbs().get_device_list(&count);
  EXPECT_NE(list, nullptr);
  if (list == nullptr || index >= count) return node;
  node.context = verbs().open_device(list[index]);
  verbs().free_device_list(list);
  EXPECT_NE(node.context, nullptr);
  ibv_port_attr port{};
  EXPECT_EQ(verbs().query_port(node.context, 1, reinterpret_cast<_compat_ibv_port_attr*>(&port)), 0);
  node.roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
  node.lid = port.lid;
  node.pd = verbs().alloc_pd(node.context);
  node.cq = verbs().create_cq(node.context, cqe, nullptr, nullptr, 0);
  EXPECT_NE(node.pd, nullptr);
  EXPECT_NE(node.cq, nullptr);
  return node;
}

inline ibv_qp* make_qp(const Node& node, uint32_t send_wr = 64, uint32_t recv_wr = 64, int sq_sig_all = 0) {
  ibv_qp_init_attr init{};
  init.send_cq = node.cq;
  init.recv_cq = node.cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = sq_sig_all;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = recv_wr;
  init.cap.max_send_sge = 4;
  init.cap.max_recv_sge = 4;
  init.cap.max_inline_data = 64;
  ibv_qp* qp = verbs().create_qp(node.pd, &init);
  EXPECT_NE(qp, nullptr);
  return qp;
}

// sgid index 1: RoCE v2, as the transport uses.
inline QpInfo info_of(const Node& node, ibv_qp* qp, uint32_t psn, int gid_index = 1) {
  QpInfo info;
  info.qpn = qp->qp_num;
  info.psn = psn;
  info.lid = node.lid;
  EXPECT_EQ(verbs().query_gid(node.context, 1, node.roce ? gid_index : 0, &info.gid), 0);
  return info;
}

inline int to_init(ibv_qp* qp,
                   unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = access;
  return verbs().modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

inline int to_rtr(const Node& node, ibv_qp* qp, const QpInfo& remote, int gid_index = 1) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = 1;
  if (node.roce) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    attr.ah_attr.grh.hop_limit = 1;
  } else {
    attr.ah_attr.dlid = remote.lid;
  }
  return verbs().modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

inline int to_rts(ibv_qp* qp, uint32_t psn) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = psn;
  attr.max_rd_atomic = 1;
  return verbs().modify_qp(
      qp, &attr,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Connects `qp` (whose own psn is `my_psn`) to `remote`.
inline void bring_up(const Node& node, ibv_qp* qp, const QpInfo& remote, uint32_t my_psn) {
  ASSERT_EQ(to_init(qp), 0);
  ASSERT_EQ(to_rtr(node, qp, remote), 0);
  ASSERT_EQ(to_rts(qp, my_psn), 0);
}

// Two connected QPs in this process (loopback), each with its own CQ.
struct Pair {
  Node a;
  Node b;
  ibv_qp* qa = nullptr;
  ibv_qp* qb = nullptr;
};

inline Pair make_pair_of_qps(int cqe = 256, int a_sig_all = 0) {
  Pair p;
  p.a = open_node(0, cqe);
  p.b = open_node(0, cqe);
  p.qa = make_qp(p.a, 64, 64, a_sig_all);
  p.qb = make_qp(p.b);
  QpInfo ia = info_of(p.a, p.qa, 100);
  QpInfo ib = info_of(p.b, p.qb, 200);
  bring_up(p.a, p.qa, ib, 100);
  bring_up(p.b, p.qb, ia, 200);
  return p;
}

inline int post_write(ibv_qp* qp, ibv_wr_opcode opcode, uint64_t wr_id, ibv_mr* local, uint64_t local_addr,
                      uint32_t length, uint64_t remote_addr, uint32_t rkey, uint32_t imm = 0,
                      unsigned flags = IBV_SEND_SIGNALED) {
  ibv_sge sge{local_addr, length, local != nullptr ? local->lkey : 0};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = length == 0 ? 0 : 1;
  wr.opcode = opcode;
  wr.send_flags = flags;
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

inline int post_recv(ibv_qp* qp, uint64_t wr_id, ibv_mr* mr = nullptr, uint64_t addr = 0, uint32_t length = 0) {
  ibv_sge sge{addr, length, mr != nullptr ? mr->lkey : 0};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = mr != nullptr ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

inline void fill_pattern(std::vector<uint8_t>& bytes, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : bytes) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
}

inline ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(verbs().query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

// Waits (capped) until `qp` is in ERR: a responder's error is applied by the fake's service thread.
inline bool wait_for_error_state(ibv_qp* qp) {
  auto give_up = std::chrono::steady_clock::now() + kCap;
  while (std::chrono::steady_clock::now() < give_up) {
    if (qp_state(qp) == IBV_QPS_ERR) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

constexpr unsigned kWritable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

struct Buffers {
  std::vector<uint8_t> source = std::vector<uint8_t>(4096, 1);
  std::vector<uint8_t> target = std::vector<uint8_t>(4096, 0);
  ibv_mr* src = nullptr;
  ibv_mr* dst = nullptr;
};

inline void register_buffers(const Pair& p, Buffers* b, unsigned target_access) {
  b->src = verbs().reg_mr(p.a.pd, b->source.data(), b->source.size(), IBV_ACCESS_LOCAL_WRITE);
  b->dst = verbs().reg_mr(p.b.pd, b->target.data(), b->target.size(), target_access);
}

inline uintptr_t at(std::vector<uint8_t>& v, size_t offset = 0) {
  return reinterpret_cast<uintptr_t>(v.data()) + offset;
}

template <typename T> bool send_value(int fd, const T& value) {
  return write(fd, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value));
}

template <typename T> bool receive_value(int fd, T* value) {
  size_t got = 0;
  while (got < sizeof(T)) {
    ssize_t n = read(fd, reinterpret_cast<char*>(value) + got, sizeof(T) - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class FakeVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(verbs().violations, nullptr);
    violations_at_start_ = verbs().violations();
    setenv("FAKE_VERBS_DEVICES", "fake0:roce:lo:100", 1);
    unsetenv("FAKE_VERBS_VIOLATIONS");
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the fake runs a service thread
  }
  void TearDown() override {
    unsetenv("FAKE_VERBS_DEVICES");
    unsetenv("FAKE_VERBS_VIOLATIONS");
  }
  void report_mode() { setenv("FAKE_VERBS_VIOLATIONS", "report", 1); }
  // Violations this test caused (the count is per process; earlier tests may have run in it).
  uint64_t new_violations() const { return verbs().violations() - violations_at_start_; }

 private:
  uint64_t violations_at_start_ = 0;
};

}  // namespace fake_verbs_test
