// What the verbs transport does with the device's asynchronous events: failures that completions
// would report late (a port down: after the whole retry budget) or never (a fatal device error:
// nothing completes any more) fail the comms they break, naming the event, and only those.
#include <gtest/gtest.h>

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

TEST_F(IbTransportTest, APortGoingDownFailsTheCommsOnItNamingThePort) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "down0:roce:lo:100");
  ASSERT_NO_FATAL_FAILURE(connect(patient()));
  roundtrip(4096, 4096, 1);
  std::vector<unsigned char> out = pattern(65536, 2), in(65536);
  auto send_region = reg_send(out.data(), out.size());
  auto recv_region = reg_recv(in.data(), in.size());
  ASSERT_TRUE(fake::set_port_state("down0", 1, false));
  Request *r = nullptr, *s = nullptr;
  Status posted = pair_.recv->irecv(in.data(), in.size(), &r);
  if (posted.is_ok()) {
    ASSERT_NE(r, nullptr);
    Completion cr;
    posted = testing::wait(r, &cr);
  }
  EXPECT_EQ(posted.code(), Code::SystemError) << posted.message();
  EXPECT_NE(posted.message().find("port down0:1 went down"), std::string::npos) << posted.message();
  posted = pair_.send->isend(out.data(), out.size(), &s);
  if (posted.is_ok()) {
    ASSERT_NE(s, nullptr);
    Completion cs;
    posted = testing::wait(s, &cs);
  }
  EXPECT_EQ(posted.code(), Code::SystemError) << posted.message();
  EXPECT_NE(posted.message().find("port down0:1 went down"), std::string::npos) << posted.message();
  EXPECT_TRUE(fake::set_port_state("down0", 1, true));
}

// The event, not the port's state when a comm looks, decides: a comm that was on the port when it
// went down fails even when the link is back by then, and comms connected after it came back are
// not failed by the old event.
TEST_F(IbTransportTest, CommsConnectedAfterThePortCameBackAreUntouchedByTheOldEvent) {
  ScopedEnv devices("FAKE_VERBS_DEVICES", "flap0:roce:lo:100");
  ASSERT_NO_FATAL_FAILURE(connect(patient()));
  ASSERT_TRUE(fake::set_port_state("flap0", 1, false));
  ASSERT_TRUE(fake::set_port_state("flap0", 1, true));
  std::vector<unsigned char> in(4096);
  auto recv_region = reg_recv(in.data(), in.size());
  Request* r = nullptr;
  Status st = pair_.recv->irecv(in.data(), in.size(), &r);
  if (st.is_ok() && r) {
    Completion cr;
    st = testing::wait(r, &cr);
  }
  EXPECT_NE(st.message().find("went down"), std::string::npos) << st.message();
  recv_region.reset();
  pair_ = testing::Pair{};
  ASSERT_TRUE(testing::connect_pair(*transport_, *transport_, &pair_).is_ok());
  roundtrip(300000, 300000, 3);
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
  ASSERT_TRUE(pair_.send->isend(out.data(), out.size(), &s).is_ok());  // no receive: it waits
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(fake::device_fatal("fatal0"));
  Completion cs;
  Status st = testing::wait(s, &cs);
  EXPECT_EQ(st.code(), Code::SystemError) << st.message();
  EXPECT_NE(st.message().find("RDMA device fatal0 had a fatal error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(pair_.send->peer()), std::string::npos) << st.message();
  std::vector<unsigned char> in(4096);
  auto recv_region = reg_recv(in.data(), in.size());
  Request* r = nullptr;
  st = pair_.recv->irecv(in.data(), in.size(), &r);
  if (st.is_ok() && r) {
    Completion cr;
    st = testing::wait(r, &cr);
  }
  EXPECT_FALSE(st.is_ok()) << "a receive on a failed device completed";
}

}  // namespace
}  // namespace sieve::net
