// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/ib_test_support.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

namespace sieve::net::ib_test {

std::vector<unsigned char> pattern(size_t size, uint32_t seed) {
  std::vector<unsigned char> v(size);
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

bool same_bytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

namespace fake {
namespace {

// A symbol of the loaded libibverbs.so.1, or null (the library stays loaded: RTLD_NODELETE).
template <typename Fn> Fn* symbol(const char* name) {
  void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!library) return nullptr;
  auto* fn = reinterpret_cast<Fn*>(dlsym(library, name));
  dlclose(library);
  return fn;
}

}  // namespace

uint64_t violations() {
  auto* counter = symbol<uint64_t()>("fake_verbs_violations");
  return counter ? counter() : ~uint64_t(0);
}

int fork_initialized() {
  auto* query = symbol<int()>("fake_verbs_fork_initialized");
  return query ? query() : -1;
}

std::vector<ibv_qp_attr> qp_attributes() {
  auto* query = symbol<int(ibv_qp_attr*, int)>("fake_verbs_qp_attributes");
  if (!query) {
    ADD_FAILURE() << "the fake libibverbs is not the one loaded";
    return {};
  }
  std::vector<ibv_qp_attr> attrs(static_cast<size_t>(query(nullptr, 0)));
  attrs.resize(static_cast<size_t>(query(attrs.data(), static_cast<int>(attrs.size()))));
  return attrs;
}

std::vector<ibv_qp_attr> connected_qps() {
  std::vector<ibv_qp_attr> connected;
  for (const ibv_qp_attr& a : qp_attributes())
    if (a.qp_state == IBV_QPS_RTS) connected.push_back(a);
  return connected;
}

int mr_access(const void* address) {
  auto* query = symbol<int(const void*)>("fake_verbs_mr_access");
  return query ? query(address) : -2;
}

Posted posted(ibv_wr_opcode opcode) {
  Posted p;
  if (auto* query = symbol<void(int, uint64_t*, uint64_t*)>("fake_verbs_posted")) query(opcode, &p.requests, &p.bytes);
  return p;
}

int live_mrs() {
  auto* count = symbol<int()>("fake_verbs_live_mrs");
  return count ? count() : -1;
}

bool set_gid(const std::string& device, int port, int index, const ibv_gid* gid, ibv_gid_type type) {
  auto* set = symbol<int(const char*, int, int, const void*, int)>("fake_verbs_set_gid");
  return set && set(device.c_str(), port, index, gid ? gid->raw : nullptr, static_cast<int>(type)) == 0;
}

bool set_port_state(const std::string& device, int port, bool active) {
  auto* set = symbol<int(const char*, int, int)>("fake_verbs_set_port_state");
  return set && set(device.c_str(), port, active ? 1 : 0) == 0;
}

void hold_writes(const void* address, bool hold) {
  auto* set = symbol<void(const void*, int)>("fake_verbs_hold_writes");
  if (!set) {
    ADD_FAILURE() << "the fake libibverbs is not the one loaded";
    return;
  }
  set(address, hold ? 1 : 0);
}

bool device_fatal(const std::string& device) {
  auto* fail = symbol<int(const char*)>("fake_verbs_device_fatal");
  return fail && fail(device.c_str()) == 0;
}

}  // namespace fake

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  if (const char* old = std::getenv(name)) {
    had_ = true;
    old_ = old;
  }
  setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

TransportOptions ib_options(int qps) {
  TransportOptions o = testing::loopback_options();
  o.ib_qps = qps;
  return o;
}

void IbTransportTest::connect(const TransportOptions& options) {
  Status st = Transport::create_ib(options, &transport_);
  ASSERT_TRUE(st.ok()) << st.message();
  violations_before_ = fake::violations();
  ASSERT_NE(violations_before_, ~uint64_t(0)) << "the fake libibverbs is not the one loaded (LD_LIBRARY_PATH)";
  st = testing::connect_pair(*transport_, *transport_, &pair_);
  ASSERT_TRUE(st.ok()) << st.message();
}

void IbTransportTest::connect(const TransportOptions& listener, const TransportOptions& connector, int traffic_class) {
  Status st = Transport::create_ib(listener, &transport_);
  ASSERT_TRUE(st.ok()) << st.message();
  st = Transport::create_ib(connector, &connector_transport_);
  ASSERT_TRUE(st.ok()) << st.message();
  violations_before_ = fake::violations();
  ASSERT_NE(violations_before_, ~uint64_t(0)) << "the fake libibverbs is not the one loaded (LD_LIBRARY_PATH)";
  st = testing::connect_pair(*transport_, *connector_transport_, &pair_, traffic_class);
  ASSERT_TRUE(st.ok()) << st.message();
}

Status IbTransportTest::connect_failure(const TransportOptions& listener, const TransportOptions& connector) {
  Status st = Transport::create_ib(listener, &transport_);
  if (st.ok()) st = Transport::create_ib(connector, &connector_transport_);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return st;
  violations_before_ = fake::violations();
  st = testing::connect_pair(*transport_, *connector_transport_, &pair_);
  EXPECT_FALSE(st.ok()) << "connected";
  return st;
}

void IbTransportTest::TearDown() {
  pair_ = testing::Pair{};
  if (transport_) { EXPECT_EQ(fake::violations(), violations_before_) << "the transport broke a verbs rule"; }
}

std::unique_ptr<MemoryRegion> IbTransportTest::reg_send(const void* data, size_t size) {
  std::unique_ptr<MemoryRegion> r;
  Status st = pair_.send->register_memory({const_cast<void*>(data), size, -1, 0}, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

std::unique_ptr<MemoryRegion> IbTransportTest::reg_recv(void* data, size_t size) {
  std::unique_ptr<MemoryRegion> r;
  Status st = pair_.recv->register_memory({data, size, -1, 0}, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

void IbTransportTest::roundtrip(size_t size, size_t capacity, uint32_t seed) {
  std::vector<unsigned char> out = pattern(size, seed);
  std::vector<unsigned char> in(capacity + 64, kCanary);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), capacity);
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), capacity, &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), size, &s).ok());
  ASSERT_TRUE(r && s);
  Completion cr, cs;
  Status st = testing::wait_both(s, &cs, r, &cr, std::chrono::seconds(60));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cs.size, size);
  EXPECT_EQ(cr.size, size);
  EXPECT_TRUE(cs.sent);
  EXPECT_FALSE(cr.sent);
  ASSERT_TRUE(same_bytes(in.data(), out.data(), size)) << size << " bytes";
  for (size_t i = size; i < in.size(); ++i) ASSERT_EQ(in[i], kCanary) << "wrote past " << size << " at " << i;
}

}  // namespace sieve::net::ib_test
