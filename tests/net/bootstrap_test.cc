// SPDX-License-Identifier: Apache-2.0
// The connecting side's reading of a handle: the same for both transports, since both connect a
// bootstrap socket to the listener's address.
#include "net/bootstrap.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <algorithm>
#include <iterator>

namespace sieve::net {
namespace {

SocketAddress ipv6(const char* text, uint32_t scope, uint16_t port) {
  SocketAddress a;
  auto* in = reinterpret_cast<sockaddr_in6*>(&a.storage);
  in->sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &in->sin6_addr);
  in->sin6_scope_id = scope;
  in->sin6_port = htons(port);
  a.length = sizeof(sockaddr_in6);
  return a;
}

uint32_t scope_of(const SocketAddress& a) { return reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_scope_id; }

Handle handle_for(const SocketAddress& listener) {
  wire::HandleFields fields;
  fields.address = listener;
  fields.listener_nonce = 42;
  Handle h;
  wire::encode_handle(fields, h.bytes);
  return h;
}

TEST(ReadPeerHandle, ALinkLocalListenerIsReachedThroughOurOwnInterface) {
  Device local;
  local.address = ipv6("fe80::2", 3, 0);
  wire::HandleFields fields;
  ASSERT_TRUE(read_peer_handle({local}, 0, handle_for(ipv6("fe80::1", 7, 4000)), &fields).ok());
  EXPECT_EQ(scope_of(fields.address), 3u) << "the listener's interface index names an interface of its host";
  EXPECT_EQ(fields.address.port(), 4000);
  EXPECT_EQ(fields.listener_nonce, 42u);
}

TEST(ReadPeerHandle, AGlobalListenerAddressIsLeftAsSent) {
  Device local;
  local.address = ipv6("fe80::2", 3, 0);
  wire::HandleFields fields;
  ASSERT_TRUE(read_peer_handle({local}, 0, handle_for(ipv6("fd00::1", 0, 4000)), &fields).ok());
  EXPECT_EQ(scope_of(fields.address), 0u);
}

TEST(ReadPeerHandle, AGarbledHandleIsRefused) {
  Device local;
  local.address = ipv6("fe80::2", 3, 0);
  Handle h{};
  std::fill(std::begin(h.bytes), std::end(h.bytes), uint8_t{0xA5});
  wire::HandleFields fields;
  EXPECT_FALSE(read_peer_handle({local}, 0, h, &fields).ok());
}

TEST(ReadPeerHandle, ADeviceThatIsNotOursIsRefusedByIndexAndCount) {
  Device local;
  local.address = ipv6("fe80::2", 3, 0);
  wire::HandleFields fields;
  for (int dev : {1, -1}) {
    Status st = read_peer_handle({local}, dev, handle_for(ipv6("fd00::1", 0, 4000)), &fields);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("device " + std::to_string(dev) + " does not exist (1 devices)"), std::string::npos)
        << st.message();
  }
}

TEST(OpenBootstrapListener, ADeviceThatIsNotOursIsRefusedBeforeAnySocketOpens) {
  Handle h{};
  BootstrapListener listener;
  Status st = open_bootstrap_listener({}, 0, &h, &listener);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("device 0 does not exist (0 devices)"), std::string::npos) << st.message();
  EXPECT_FALSE(listener.fd.valid());
}

}  // namespace
}  // namespace sieve::net
