// SPDX-License-Identifier: Apache-2.0
// A hand-written sender speaking Sieve's wire protocol over plain blocking sockets: it lets the
// tests put exactly the bytes they want on the wire (corrupt frames, a stripe cut in half) and
// checks that the receiving comm reports each problem as an error instead of hanging or overflowing.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>
#include <vector>

#include "compress/codec.h"
#include "net/socket.h"
#include "net/wire.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using testing::loopback_options;
using testing::make_transport;

bool send_all(int fd, const void* data, size_t size) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One control socket and one data socket, handshaken by hand (no job token).
struct RawSender {
  Fd control, data;
  uint64_t chunk_size = 128 * 1024;
  uint32_t caps = 0;  // wire::kCapZeroElide: a peer that may send codec frames

  bool connect(const Handle& handle) {
    wire::HandleFields fields;
    if (!wire::decode_handle(handle.bytes, &fields).ok()) return false;
    Fd* fds[2] = {&control, &data};
    for (uint16_t i = 0; i < 2; ++i) {
      fds[i]->reset(::socket(fields.address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::connect(fds[i]->get(), reinterpret_cast<const sockaddr*>(&fields.address.storage), fields.address.length))
        return false;
      wire::Hello hello{i, 1, caps, fields.listener_nonce, 0x5eed, 100u + i, chunk_size};
      hello.mac = wire::hello_mac("", hello);
      uint8_t buf[wire::kHelloBytes];
      wire::encode_hello(hello, buf);
      if (!send_all(fds[i]->get(), buf, wire::kHelloBytes)) return false;
      if (!recv_all(fds[i]->get(), buf, wire::kWelcomeBytes)) return false;
      wire::Welcome w;
      if (!wire::decode_welcome(buf, &w).ok()) return false;
      wire::encode_proof({wire::handshake_mac("", wire::Role::kConnector, hello, w.server_nonce)}, buf);
      if (!send_all(fds[i]->get(), buf, wire::kProofBytes)) return false;
    }
    return true;
  }

  bool frame(uint32_t flags, uint64_t sequence, uint64_t length) {
    uint8_t h[wire::kFrameHeaderBytes];
    wire::encode_frame({flags, sequence, length}, h);
    return send_all(control.get(), h, sizeof(h));
  }
};

class RawPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions o = loopback_options();
    o.peer_timeout_ms = 300;
    transport_ = make_transport(o);
    ASSERT_NE(transport_, nullptr);
    ASSERT_TRUE(transport_->listen(0, &handle_, &listener_).ok());
    std::thread client([&] { connected_ = raw_.connect(handle_); });
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!recv_ && std::chrono::steady_clock::now() < end) {
      ASSERT_TRUE(listener_->accept(&recv_).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    client.join();
    ASSERT_TRUE(connected_);
    ASSERT_NE(recv_, nullptr);
  }

  Status receive(size_t capacity, Completion* c, std::vector<char>* buffer = nullptr) {
    std::vector<char> local(capacity);
    std::vector<char>& in = buffer ? *buffer : local;
    in.resize(capacity);
    Request* r = nullptr;
    Status st = recv_->irecv(in.data(), capacity, &r);
    if (!st.ok()) return st;
    return testing::wait(r, c, std::chrono::seconds(5));
  }

  std::unique_ptr<Transport> transport_;
  Handle handle_;
  std::unique_ptr<ListenComm> listener_;
  std::unique_ptr<RecvComm> recv_;
  RawSender raw_;
  bool connected_ = false;
};

TEST_F(RawPeer, WellFormedInlineMessageArrives) {
  ASSERT_TRUE(raw_.frame(wire::kFlagInline, 0, 5));
  ASSERT_TRUE(send_all(raw_.control.get(), "hello", 5));
  Completion c;
  std::vector<char> in;
  ASSERT_TRUE(receive(100, &c, &in).ok());
  EXPECT_EQ(c.size, 5u);
  EXPECT_EQ(std::string(in.data(), 5), "hello");
}

TEST_F(RawPeer, BadFrameMagicIsRemoteError) {
  const char junk[wire::kFrameHeaderBytes] = "not a sieve frame!!!!!!";
  ASSERT_TRUE(send_all(raw_.control.get(), junk, sizeof(junk)));
  Completion c;
  Status st = receive(100, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();
}

TEST_F(RawPeer, WrongSequenceIsRemoteError) {
  ASSERT_TRUE(raw_.frame(wire::kFlagInline, 3, 0));
  Completion c;
  Status st = receive(100, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("sequence"), std::string::npos) << st.message();
}

TEST_F(RawPeer, UnnegotiatedCodecFlagIsRemoteError) {
  ASSERT_TRUE(raw_.frame(wire::kFlagInline | wire::kFlagCodec, 0, 0));
  Completion c;
  EXPECT_EQ(receive(100, &c).code(), Code::kRemoteError);
}

TEST_F(RawPeer, StripeHeaderOutOfStepIsRemoteError) {
  const uint64_t length = 100 * 1024;  // one stripe (64K minimum stripe rounds up to the message)
  ASSERT_TRUE(raw_.frame(0, 0, length));
  uint8_t h[wire::kChunkHeaderBytes];
  wire::encode_chunk({static_cast<uint32_t>(length), 0, 4096}, h);  // wrong offset
  ASSERT_TRUE(send_all(raw_.data.get(), h, sizeof(h)));
  std::vector<char> payload(length, 1);
  ASSERT_TRUE(send_all(raw_.data.get(), payload.data(), payload.size()));
  Completion c;
  Status st = receive(length, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("out of step"), std::string::npos) << st.message();
}

TEST_F(RawPeer, SenderStuckMidStripeTimesOut) {
  const uint64_t length = 100 * 1024;
  ASSERT_TRUE(raw_.frame(0, 0, length));
  uint8_t h[wire::kChunkHeaderBytes];
  wire::encode_chunk({static_cast<uint32_t>(length), 0, 0}, h);
  ASSERT_TRUE(send_all(raw_.data.get(), h, sizeof(h)));
  std::vector<char> half(length / 2, 2);
  ASSERT_TRUE(send_all(raw_.data.get(), half.data(), half.size()));  // then silence, socket open
  Completion c;
  Status st = receive(length, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("SIEVE_PEER_TIMEOUT_MS"), std::string::npos) << st.message();
}

TEST_F(RawPeer, SenderStuckMidInlinePayloadTimesOut) {
  ASSERT_TRUE(raw_.frame(wire::kFlagInline, 0, 1000));
  ASSERT_TRUE(send_all(raw_.control.get(), "partial", 7));
  Completion c;
  Status st = receive(1000, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("SIEVE_PEER_TIMEOUT_MS"), std::string::npos) << st.message();
}

TEST_F(RawPeer, IdleSenderIsNotAnError) {
  // A posted receive with nothing sent is a slow peer, not a dead one: no error, just not done.
  std::vector<char> in(100);
  Request* r = nullptr;
  ASSERT_TRUE(recv_->irecv(in.data(), in.size(), &r).ok());
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);  // > peer timeout
  while (std::chrono::steady_clock::now() < end) {
    Completion c;
    ASSERT_TRUE(r->test(&c).ok());
    ASSERT_FALSE(c.done);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(raw_.frame(wire::kFlagInline, 0, 2));
  ASSERT_TRUE(send_all(raw_.control.get(), "ok", 2));
  Completion c;
  ASSERT_TRUE(testing::wait(r, &c).ok());
  EXPECT_EQ(c.size, 2u);
}

// ---- codec frames from a peer that negotiated kCapZeroElide ----

class RawCodecPeer : public RawPeer {
 protected:
  void SetUp() override {
    raw_.caps = wire::kCapZeroElide;
    RawPeer::SetUp();
  }

  // One message of one stripe whose codec frame is `frame`.
  bool send_codec_stripe(uint64_t length, const std::vector<uint8_t>& frame) {
    if (!raw_.frame(wire::kFlagCodec, 0, length)) return false;
    uint8_t h[wire::kChunkHeaderBytes];
    wire::encode_chunk({static_cast<uint32_t>(length), 0, 0}, h);
    return send_all(raw_.data.get(), h, sizeof(h)) && send_all(raw_.data.get(), frame.data(), frame.size());
  }

  static std::vector<uint8_t> sparse_frame(uint64_t length, std::vector<char>* original) {
    original->assign(length, 0);
    for (size_t i = 0; i < length; i += 20) (*original)[i] = static_cast<char>(i / 20 + 1);
    std::vector<uint8_t> frame(compress::encode_bound(length));
    frame.resize(compress::encode(original->data(), length, frame.data(), frame.size()));
    return frame;
  }
};

TEST_F(RawCodecPeer, ZeroElidedStripeDecodesIntoTheBuffer) {
  const uint64_t length = 100 * 1024;
  std::vector<char> original;
  std::vector<uint8_t> frame = sparse_frame(length, &original);
  ASSERT_LT(frame.size(), length / 2);
  ASSERT_TRUE(send_codec_stripe(length, frame));
  Completion c;
  std::vector<char> in;
  ASSERT_TRUE(receive(length + 10, &c, &in).ok());
  EXPECT_EQ(c.size, length);
  EXPECT_EQ(c.wire_bytes, wire::kFrameHeaderBytes + wire::kChunkHeaderBytes + frame.size());
  EXPECT_EQ(std::memcmp(in.data(), original.data(), length), 0);
}

TEST_F(RawCodecPeer, CorruptBitmapIsRemoteErrorNamingThePeer) {
  const uint64_t length = 100 * 1024;
  std::vector<char> original;
  std::vector<uint8_t> frame = sparse_frame(length, &original);
  frame[compress::kFrameHeaderSize] ^= 0x02;  // one more nonzero word than the count says
  ASSERT_TRUE(send_codec_stripe(length, frame));
  Completion c;
  Status st = receive(length, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("corrupt codec frame from 127.0.0.1"), std::string::npos) << st.message();
}

TEST_F(RawCodecPeer, FrameAnnouncingMoreThanItsStripeIsRefused) {
  const uint64_t length = 100 * 1024;
  std::vector<char> original;
  std::vector<uint8_t> frame = sparse_frame(length * 2, &original);  // decodes to twice the stripe
  ASSERT_TRUE(send_codec_stripe(length, frame));
  Completion c;
  std::vector<char> in;
  Status st = receive(length, &c, &in);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("corrupt codec frame"), std::string::npos) << st.message();
}

TEST_F(RawCodecPeer, GarbageCodecHeaderIsRemoteError) {
  const uint64_t length = 100 * 1024;
  std::vector<uint8_t> frame(compress::kFrameHeaderSize + length, 0xab);
  ASSERT_TRUE(send_codec_stripe(length, frame));
  Completion c;
  Status st = receive(length, &c);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("corrupt codec frame"), std::string::npos) << st.message();
}

TEST_F(RawCodecPeer, InlineFrameFlaggedCodecIsRemoteError) {
  ASSERT_TRUE(raw_.frame(wire::kFlagInline | wire::kFlagCodec, 0, 4));
  ASSERT_TRUE(send_all(raw_.control.get(), "abcd", 4));
  Completion c;
  EXPECT_EQ(receive(100, &c).code(), Code::kRemoteError);
}

}  // namespace
}  // namespace sieve::net
