// SPDX-License-Identifier: Apache-2.0
// Framing and handshake messages: round trips and validation of every field, SHA-256/HMAC vectors.
#include <gtest/gtest.h>

#include <cstring>

#include "net/sha256.h"
#include "net/wire.h"

namespace sieve::net {
namespace {

std::string hex(const Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex(sha256("", 0)), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc", 3)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hex(sha256(two_blocks.data(), two_blocks.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, HmacRfc4231) {
  std::string data = "what do ya want for nothing?";
  EXPECT_EQ(hex(hmac_sha256("Jefe", data.data(), data.size())),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  std::string long_key(131, '\xaa');
  std::string text = "Test Using Larger Than Block-Size Key - Hash Key First";
  EXPECT_EQ(hex(hmac_sha256(long_key, text.data(), text.size())),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Frame, RoundTrip) {
  uint8_t bytes[wire::kFrameHeaderBytes];
  wire::encode_frame({wire::kFlagInline, 77, 123456789012ull}, bytes);
  wire::FrameHeader f;
  ASSERT_TRUE(wire::decode_frame(bytes, 77, wire::kFlagInline, &f).ok());
  EXPECT_EQ(f.flags, wire::kFlagInline);
  EXPECT_EQ(f.sequence, 77u);
  EXPECT_EQ(f.length, 123456789012ull);
}

TEST(Frame, RejectsBadMagicSequenceAndFlags) {
  uint8_t bytes[wire::kFrameHeaderBytes];
  wire::FrameHeader f;
  wire::encode_frame({0, 5, 10}, bytes);
  EXPECT_EQ(wire::decode_frame(bytes, 6, wire::kFlagInline, &f).code(), Code::kRemoteError);
  wire::encode_frame({wire::kFlagCodec, 5, 10}, bytes);
  Status st = wire::decode_frame(bytes, 5, wire::kFlagInline, &f);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("flags"), std::string::npos);
  EXPECT_TRUE(wire::decode_frame(bytes, 5, wire::kFlagInline | wire::kFlagCodec, &f).ok());
  wire::encode_frame({0, 5, 10}, bytes);
  bytes[1] ^= 0xff;
  EXPECT_NE(wire::decode_frame(bytes, 5, wire::kFlagInline, &f).message().find("magic"), std::string::npos);
}

TEST(Chunk, HeaderMustMatchThePlan) {
  uint8_t bytes[wire::kChunkHeaderBytes];
  wire::ChunkHeader c{4096, 9, 8192};
  wire::encode_chunk(c, bytes);
  EXPECT_TRUE(wire::check_chunk(bytes, c).ok());
  EXPECT_FALSE(wire::check_chunk(bytes, {4096, 10, 8192}).ok());
  EXPECT_FALSE(wire::check_chunk(bytes, {4096, 9, 0}).ok());
  EXPECT_FALSE(wire::check_chunk(bytes, {4095, 9, 8192}).ok());
  bytes[0] = 0;
  EXPECT_FALSE(wire::check_chunk(bytes, c).ok());
}

TEST(StripePlan, CoversTheMessageWithBoundedChunks) {
  for (uint64_t length : {1ull, 4095ull, 65536ull, 65537ull, 1000000ull, 64ull << 20, (1ull << 32) + 5}) {
    for (int nsocks : {1, 2, 4, 16}) {
      for (uint64_t chunk : {4096ull, 128ull * 1024, 512ull * 1024, 4ull << 20}) {
        wire::StripePlan p = wire::plan_stripes(length, nsocks, chunk);
        ASSERT_GT(p.count, 0u);
        EXPECT_GE(p.chunk * p.count, length);
        EXPECT_LT(p.chunk * (p.count - 1), length);
        EXPECT_LE(p.chunk, std::max<uint64_t>(wire::kMinStripe, (chunk + 4095) & ~4095ull));
      }
    }
  }
  EXPECT_EQ(wire::plan_stripes(0, 4, 1 << 20).count, 0u);
  // A message just over the inline threshold still spreads over the sockets.
  EXPECT_EQ(wire::plan_stripes(1 << 20, 4, 512 * 1024).count, 4u);
}

TEST(Handle, RoundTripIpv4AndIpv6) {
  wire::HandleFields h;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(4321);
  in.sin_addr.s_addr = htonl(0x0a000001);
  std::memcpy(&h.address.storage, &in, sizeof(in));
  h.address.length = sizeof(in);
  h.listener_nonce = 0xdeadbeefcafef00dull;
  uint8_t bytes[wire::kHandleBytes];
  wire::encode_handle(h, bytes);
  wire::HandleFields back;
  ASSERT_TRUE(wire::decode_handle(bytes, &back).ok());
  EXPECT_EQ(back.address.text(), "10.0.0.1:4321");
  EXPECT_EQ(back.listener_nonce, h.listener_nonce);
  EXPECT_EQ(back.pending_connect, 0u);
  wire::set_handle_pending(bytes, 99);
  EXPECT_EQ(wire::handle_pending(bytes), 99u);

  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(5555);
  in6.sin6_addr.s6_addr[15] = 1;
  std::memcpy(&h.address.storage, &in6, sizeof(in6));
  h.address.length = sizeof(in6);
  wire::encode_handle(h, bytes);
  ASSERT_TRUE(wire::decode_handle(bytes, &back).ok());
  EXPECT_EQ(back.address.text(), "[::1]:5555");
}

TEST(Handle, RejectsForeignBytes) {
  uint8_t bytes[wire::kHandleBytes] = {};
  wire::HandleFields h;
  EXPECT_EQ(wire::decode_handle(bytes, &h).code(), Code::kInvalidArgument);
}

TEST(Handshake, MessagesRoundTripAndValidate) {
  wire::Hello hello{3, 4, 0, 111, 222, 333, 1 << 20};
  hello.mac = wire::hello_mac("k", hello);
  uint8_t hb[wire::kHelloBytes];
  wire::encode_hello(hello, hb);
  wire::Hello back{};
  ASSERT_TRUE(wire::decode_hello(hb, &back).ok());
  EXPECT_EQ(back.mac, hello.mac);
  EXPECT_EQ(back.socket_index, 3);
  EXPECT_EQ(back.nsocks, 4);
  EXPECT_EQ(back.listener_nonce, 111u);
  EXPECT_EQ(back.connection_id, 222u);
  EXPECT_EQ(back.client_nonce, 333u);
  EXPECT_EQ(back.chunk_size, 1u << 20);
  wire::Hello bad = hello;
  bad.socket_index = 5;
  wire::encode_hello(bad, hb);
  EXPECT_FALSE(wire::decode_hello(hb, &back).ok());
  bad = hello;
  bad.nsocks = 0;
  wire::encode_hello(bad, hb);
  EXPECT_FALSE(wire::decode_hello(hb, &back).ok());

  wire::Welcome w{0, 999, wire::handshake_mac("k", wire::Role::kListener, hello, 999)};
  uint8_t wb[wire::kWelcomeBytes];
  wire::encode_welcome(w, wb);
  wire::Welcome wback{};
  ASSERT_TRUE(wire::decode_welcome(wb, &wback).ok());
  EXPECT_EQ(wback.server_nonce, 999u);
  EXPECT_EQ(wback.mac, w.mac);
  EXPECT_EQ(wback.refusal, wire::Refusal::kNone);
  wb[0] ^= 1;
  EXPECT_FALSE(wire::decode_welcome(wb, &wback).ok());

  wire::encode_welcome({0, 0, Digest{}, wire::Refusal::kHelloMac}, wb);
  ASSERT_TRUE(wire::decode_welcome(wb, &wback).ok());
  EXPECT_EQ(wback.refusal, wire::Refusal::kHelloMac);
  wb[12] = 7;  // a refusal this version does not know
  EXPECT_FALSE(wire::decode_welcome(wb, &wback).ok());
}

// The byte layout of version 2's hello: version 1's 48 bytes of fields, then the keyed hash.
TEST(Handshake, HelloLayoutOfVersion2) {
  wire::Hello hello{1, 2, 0, 0x1111111111111111ull, 0x2222222222222222ull, 0x3333333333333333ull, 65536};
  hello.mac.fill(0xab);
  uint8_t hb[wire::kHelloBytes];
  ASSERT_EQ(sizeof(hb), 80u);
  wire::encode_hello(hello, hb);
  EXPECT_EQ(hb[4], 2);
  EXPECT_EQ(hb[5], 0);
  EXPECT_EQ(hb[16], 0x11);
  EXPECT_EQ(hb[24], 0x22);
  EXPECT_EQ(hb[32], 0x33);
  for (size_t i = 48; i < 80; ++i) EXPECT_EQ(hb[i], 0xab) << i;
}

// Peers of version 1 (or any other) are told which versions met, on each message and the handle.
TEST(Handshake, AnotherVersionIsRefusedNamingBoth) {
  wire::Hello hello{0, 1, 0, 1, 2, 3, 65536};
  uint8_t hb[wire::kHelloBytes];
  wire::encode_hello(hello, hb);
  hb[4] = 1;
  wire::Hello back{};
  Status st = wire::decode_hello(hb, &back);
  EXPECT_NE(st.message().find("wire version 1, this library 2"), std::string::npos) << st.message();
  EXPECT_FALSE(wire::check_hello_start(hb, 6).ok()) << "six bytes tell the version";
  EXPECT_TRUE(wire::check_hello_start(hb, 5).ok());
  uint8_t wb[wire::kWelcomeBytes];
  wire::encode_welcome({0, 1, Digest{}}, wb);
  wb[4] = 1;
  wire::Welcome w;
  st = wire::decode_welcome(wb, &w);
  EXPECT_NE(st.message().find("wire version 1, this library 2"), std::string::npos) << st.message();
  wire::HandleFields h;
  h.address.length = sizeof(sockaddr_in);
  reinterpret_cast<sockaddr_in*>(&h.address.storage)->sin_family = AF_INET;
  h.address.set_port(1234);
  uint8_t handle[wire::kHandleBytes];
  wire::encode_handle(h, handle);
  handle[4] = 1;
  st = wire::decode_handle(handle, &h);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("version 1, this library speaks 2"), std::string::npos) << st.message();
}

// The hello's hash binds every field to the token: the nonce alone (or a replay with another
// connection, socket or nonce of the connector's) does not make one.
TEST(Handshake, HelloMacDependsOnTokenAndEveryField) {
  const wire::Hello hello{1, 2, 0, 10, 20, 30, 65536};
  const Digest base = wire::hello_mac("token", hello);
  EXPECT_NE(base, wire::hello_mac("tokem", hello));
  EXPECT_NE(base, wire::hello_mac("", hello));
  EXPECT_NE(base, wire::handshake_mac("token", wire::Role::kConnector, hello, 0));
  for (int field = 0; field < 7; ++field) {
    wire::Hello other = hello;
    switch (field) {
      case 0: other.socket_index = 2; break;
      case 1: other.nsocks = 3; break;
      case 2: other.caps = wire::kCapZeroElide; break;
      case 3: other.listener_nonce = 11; break;
      case 4: other.connection_id = 21; break;
      case 5: other.client_nonce = 31; break;
      default: other.chunk_size = 131072; break;
    }
    EXPECT_NE(base, wire::hello_mac("token", other)) << "field " << field;
  }
  wire::Hello with_mac = hello;
  with_mac.mac.fill(1);
  EXPECT_EQ(base, wire::hello_mac("token", with_mac)) << "the hash covers the fields, not itself";
}

// A verbs connection is its bootstrap socket alone: no data sockets, and only with the carrier bit.
TEST(Handshake, HelloWithoutDataSocketsIsAVerbsConnectionOnly) {
  uint8_t hb[wire::kHelloBytes];
  wire::Hello back{};
  wire::Hello verbs{0, 0, wire::kCapVerbs, 111, 222, 333, 1 << 20};
  wire::encode_hello(verbs, hb);
  ASSERT_TRUE(wire::decode_hello(hb, &back).ok());
  EXPECT_EQ(back.nsocks, 0);
  EXPECT_EQ(back.caps, wire::kCapVerbs);
  wire::Hello with_data = verbs;
  with_data.nsocks = 2;
  wire::encode_hello(with_data, hb);
  EXPECT_FALSE(wire::decode_hello(hb, &back).ok()) << "a verbs hello announcing data sockets";
  wire::Hello tcp = verbs;
  tcp.caps = 0;
  wire::encode_hello(tcp, hb);
  EXPECT_FALSE(wire::decode_hello(hb, &back).ok()) << "a TCP hello without data sockets";
}

TEST(Handshake, MacDependsOnTokenRoleNoncesAndSocket) {
  wire::Hello hello{1, 2, 0, 10, 20, 30, 65536};
  Digest base = wire::handshake_mac("token", wire::Role::kConnector, hello, 40);
  EXPECT_NE(base, wire::handshake_mac("tokem", wire::Role::kConnector, hello, 40));
  EXPECT_NE(base, wire::handshake_mac("token", wire::Role::kListener, hello, 40));
  EXPECT_NE(base, wire::handshake_mac("token", wire::Role::kConnector, hello, 41));
  wire::Hello other = hello;
  other.socket_index = 2;
  EXPECT_NE(base, wire::handshake_mac("token", wire::Role::kConnector, other, 40));
  other = hello;
  other.client_nonce = 31;
  EXPECT_NE(base, wire::handshake_mac("token", wire::Role::kConnector, other, 40));
}

}  // namespace
}  // namespace sieve::net
