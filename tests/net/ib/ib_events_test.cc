// SPDX-License-Identifier: Apache-2.0
// What the verbs transport does with the device's asynchronous events: failures that completions
// would never report (a fatal device error: nothing completes any more) fail the comms they break,
// naming the event, and only those; a port going down leaves the queue pairs' retry budget to
// decide, as NCCL does.
#include <gtest/gtest.h>

#include <thread>

#include "net/ib/device_context.h"
#include "net/transport.h"
#include "tests/net/ib/ib_test_support.h"

namespace sieve::net {
namespace {

using namespace ib_test;

// A retry budget of hours: without the async event nothing would fail these tests' requests
// before the wait gives up.
TransportOptions patient(const std::string& hca = "") {
  TransportOptions o = ib_options();
  o.ib_hca = hca;
  o.ib_timeout = 31;
  return o;
}

// A port going down is not fatal (NCCL's rule): the queue pairs retry for their budget, so a link
// flap shorter than it loses nothing. Work posted while the port is down goes out once it is back.
TEST_F(IbTransportTest, APortThatComesBackWithinTheRetryBudgetLosesNothing) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "flap0:roce:lo:100");
  ASSERT_NO_FATAL_FAILURE(connect(patient()));
  roundtrip(4096, 4096, 1);
  std::vector<unsigned char> out = pattern(65536, 2), in(65536);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  ASSERT_TRUE(fake::set_port_state("flap0", 1, false));
  Request *r = nullptr, *s = nullptr;
  ASSERT_TRUE(pair_.recv->irecv(in.data(), in.size(), &r).ok());
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());
  ASSERT_NE(r, nullptr);
  ASSERT_NE(s, nullptr);
  // Both comms see the event (each polls its device at most every 50 ms) while the port is down.
  Completion cr, cs;
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(ib::DeviceContext::kEventInterval);
    ASSERT_TRUE(r->test(&cr).ok());
    ASSERT_TRUE(s->test(&cs).ok());
    ASSERT_FALSE(cr.done);
  }
  ASSERT_TRUE(fake::set_port_state("flap0", 1, true));
  Status st = testing::wait_both(s, &cs, r, &cr);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cr.size, out.size());
  EXPECT_TRUE(same_bytes(in.data(), out.data(), out.size()));
  roundtrip(300000, 300000, 3);
}

// An outage longer than the budget ends the way RC ends it: the oldest request on the port (here
// the receive's slot announcement) completes with retry-exceeded, and the comm fails naming it.
TEST_F(IbTransportTest, APortDownForLongerThanTheRetryBudgetFailsWithRetryExceeded) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "down0:roce:lo:100");
  TransportOptions quick = ib_options();
  quick.ib_timeout = 1;  // 8 us per try
  quick.ib_retry_count = 1;
  ASSERT_NO_FATAL_FAILURE(connect(quick));
  roundtrip(4096, 4096, 4);
  std::vector<unsigned char> in(65536);
  auto recv_region = reg_recv(in.data(), in.size());
  ASSERT_TRUE(fake::set_port_state("down0", 1, false));
  Request* r = nullptr;
  Status st = pair_.recv->irecv(in.data(), in.size(), &r);
  if (st.ok() && r) {
    Completion cr;
    st = testing::wait(r, &cr);
  }
  EXPECT_EQ(st.code(), Code::kSystemError) << st.message();
  EXPECT_NE(st.message().find("retry"), std::string::npos) << st.message();
  // What NCCL's message carries: the numeric status, the queue pair, the GIDs, and the hint.
  for (const char* part : {"(status 12)", "on queue pair ", "remote queue pair ", "local GID ", "remote GID ",
                           "hint:", "SIEVE_IB_TIMEOUT=1 "})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " missing from: " << st.message();
  EXPECT_TRUE(fake::set_port_state("down0", 1, true));
}

TEST_F(IbTransportTest, AnotherPortOfTheDeviceGoingDownLeavesTheCommsOnThisOneAlone) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "two0:roce:lo:100:ports=2");
  ASSERT_NO_FATAL_FAILURE(connect(patient("=two0:1")));
  ASSERT_TRUE(fake::set_port_state("two0", 2, false));
  roundtrip(70000, 70000, 4);
  roundtrip(100, 100, 5);
  EXPECT_TRUE(fake::set_port_state("two0", 2, true));
}

// After a fatal error the device completes nothing, flushed work included: requests outstanding
// then must still end, with the device named, instead of waiting for completions that never come.
TEST_F(IbTransportTest, AFatalDeviceErrorFailsOutstandingRequestsNamingTheDevice) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "fatal0:roce:lo:100");
  ASSERT_NO_FATAL_FAILURE(connect(patient()));
  roundtrip(4096, 4096, 6);
  std::vector<unsigned char> out = pattern(65536, 7);
  auto send_region = reg_send(out.data(), out.size());
  Request* s = nullptr;
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).ok());  // no receive: it waits
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(fake::device_fatal("fatal0"));
  Completion cs;
  Status st = testing::wait(s, &cs);
  EXPECT_EQ(st.code(), Code::kSystemError) << st.message();
  EXPECT_NE(st.message().find("RDMA device fatal0 had a fatal error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(pair_.send->peer()), std::string::npos) << st.message();
  std::vector<unsigned char> in(4096);
  auto recv_region = reg_recv(in.data(), in.size());
  Request* r = nullptr;
  st = pair_.recv->irecv(in.data(), in.size(), &r);
  if (st.ok() && r) {
    Completion cr;
    st = testing::wait(r, &cr);
  }
  EXPECT_FALSE(st.ok()) << "a receive on a failed device completed";
}

}  // namespace
}  // namespace sieve::net
