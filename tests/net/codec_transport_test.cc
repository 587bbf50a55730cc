// SPDX-License-Identifier: Apache-2.0
// The zero-eliding codec on the wire: which frames go out for each pairing of SIEVE_WIRE_CODEC
// settings (and a peer that predates the codec), exact delivery of sparse and dense messages of
// awkward sizes with the codec forced on, and the logical vs wire byte counts test reports.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "net/wire.h"
#include "tests/net/transport_harness.h"

namespace sieve::net {
namespace {

using Codec = TransportOptions::Codec;
using testing::connect_pair;
using testing::loopback_options;
using testing::make_transport;
using testing::Pair;

constexpr size_t kChunk = 128 * 1024;  // loopback_options().chunk_size

// fp32 (word 4) or bf16 (word 2) values, `zero_percent` of the words exactly zero, the rest nonzero.
std::vector<char> make_data(size_t bytes, unsigned word, int zero_percent, uint32_t seed) {
  std::vector<char> v(bytes, 0);
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i + word <= bytes; i += word) {
    x = x * 1664525u + 1013904223u;
    if (static_cast<int>((x >> 8) % 100) < zero_percent) continue;
    for (unsigned b = 0; b < word; ++b) v[i + b] = static_cast<char>((x >> (8 * b)) | 1);
  }
  for (size_t i = bytes - bytes % word; i < bytes; ++i) v[i] = static_cast<char>(0x40 + i);  // odd tail
  return v;
}

TransportOptions with_codec(Codec codec, bool offer = true) {
  TransportOptions o = loopback_options();
  o.codec = codec;
  o.offer_codec = offer;
  return o;
}

struct Result {
  Completion sent, received;
};

// Sends `data` from a connector with `sender` options to a listener with `receiver` options.
void transfer(const TransportOptions& sender, const TransportOptions& receiver, const std::vector<char>& data,
              Result* result, size_t extra_capacity = 0) {
  auto tx = make_transport(sender);
  auto rx = make_transport(receiver);
  ASSERT_NE(tx, nullptr);
  ASSERT_NE(rx, nullptr);
  Pair pair;
  ASSERT_TRUE(connect_pair(*rx, *tx, &pair).ok());
  std::vector<char> in(data.size() + extra_capacity + 1, 0x5a);
  Request* r = nullptr;
  Request* s = nullptr;
  ASSERT_TRUE(pair.recv->irecv(in.data(), data.size() + extra_capacity, &r).ok());
  ASSERT_TRUE(pair.send->isend(data.data(), data.size(), &s).ok());
  ASSERT_NE(r, nullptr);
  ASSERT_NE(s, nullptr);
  Status st = testing::wait_both(s, &result->sent, r, &result->received, std::chrono::seconds(60));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(result->sent.size, data.size());
  EXPECT_EQ(result->received.size, data.size());
  EXPECT_EQ(result->sent.wire_bytes, result->received.wire_bytes) << "both ends count the same wire bytes";
  ASSERT_TRUE(data.empty() || std::memcmp(in.data(), data.data(), data.size()) == 0)
      << data.size() << " bytes arrived changed";
  EXPECT_EQ(in[data.size() + extra_capacity], 0x5a) << "wrote past the posted buffer";
}

size_t stripes_of(size_t bytes) { return wire::plan_stripes(bytes, loopback_options().nsocks, kChunk).count; }

// What a message costs on the wire without the codec: frame header, chunk headers, payload.
uint64_t raw_wire(size_t bytes) {
  return wire::kFrameHeaderBytes + stripes_of(bytes) * wire::kChunkHeaderBytes + bytes;
}

// ---- negotiation: the codec is used only when both ends offer it and the sender is not off ----

struct Pairing {
  const char* name;
  TransportOptions sender, receiver;
  bool elides;
};

TEST(CodecNegotiation, WireShrinksOnlyWhenBothEndsSupportIt) {
  const std::vector<char> sparse = make_data(1 << 20, 4, 80, 1);
  const Pairing pairings[] = {
      {"on/on", with_codec(Codec::kOn), with_codec(Codec::kOn), true},
      {"auto/auto", with_codec(Codec::kAuto), with_codec(Codec::kAuto), true},
      {"on/auto", with_codec(Codec::kOn), with_codec(Codec::kAuto), true},
      {"on sender, off receiver", with_codec(Codec::kOn), with_codec(Codec::kOff), false},
      {"off sender, on receiver", with_codec(Codec::kOff), with_codec(Codec::kOn), false},
      {"auto sender, old receiver", with_codec(Codec::kAuto), with_codec(Codec::kAuto, false), false},
      {"old sender, auto receiver", with_codec(Codec::kAuto, false), with_codec(Codec::kAuto), false},
      {"on sender, old receiver", with_codec(Codec::kOn), with_codec(Codec::kOn, false), false},
  };
  for (const Pairing& p : pairings) {
    SCOPED_TRACE(p.name);
    Result r;
    transfer(p.sender, p.receiver, sparse, &r);
    if (p.elides) {
      // 80 % zeros: 20 % of the words, a 1/32 bitmap, headers.
      EXPECT_LT(r.received.wire_bytes, sparse.size() * 25 / 100) << r.received.wire_bytes;
    } else {
      EXPECT_EQ(r.received.wire_bytes, raw_wire(sparse.size()));
    }
  }
}

// Dense data under auto costs what it costs under off: no codec flag, no per-stripe codec header.
TEST(CodecNegotiation, AutoSendsDenseMessagesExactlyAsOff) {
  const std::vector<char> dense = make_data(1 << 20, 4, 0, 2);
  Result r;
  transfer(with_codec(Codec::kAuto), with_codec(Codec::kAuto), dense, &r);
  EXPECT_EQ(r.received.wire_bytes, raw_wire(dense.size()));
}

// The message-level sample only spares dense messages: one whose sparse half pays is still elided,
// stripe by stripe, and its dense stripes go as raw codec frames behind a 24-byte header.
TEST(CodecNegotiation, AutoElidesTheSparseStripesOfAMixedMessage) {
  std::vector<char> mixed = make_data(8 * kChunk, 4, 0, 4);
  const std::vector<char> sparse = make_data(4 * kChunk, 4, 90, 5);
  std::memcpy(mixed.data() + 4 * kChunk, sparse.data(), sparse.size());
  Result r;
  transfer(with_codec(Codec::kAuto), with_codec(Codec::kAuto), mixed, &r);
  // Dense half raw (4 chunks + 24 B each); sparse half: about 10 % of the words plus a 1/32 bitmap.
  EXPECT_LT(r.received.wire_bytes, raw_wire(mixed.size()) - 3 * kChunk) << r.received.wire_bytes;
  EXPECT_GT(r.received.wire_bytes, 4 * kChunk) << r.received.wire_bytes;
}

TEST(CodecNegotiation, InlineMessagesStayRaw) {
  const std::vector<char> small = make_data(1000, 4, 100, 3);
  Result r;
  transfer(with_codec(Codec::kOn), with_codec(Codec::kOn), small, &r);
  EXPECT_EQ(r.received.wire_bytes, wire::kFrameHeaderBytes + small.size());
}

// ---- exact delivery with the codec forced on ----

TEST(CodecDelivery, SparseAndDenseOfAwkwardSizesArriveExactly) {
  const size_t sizes[] = {
      0, 1, 3, 16 * 1024 + 1, 64 * 1024 + 2, kChunk - 1, kChunk, kChunk + 1, 2 * kChunk + 3, 5 * kChunk - 2, 1000003};
  struct Kind {
    unsigned word;
    int zeros;
  } kinds[] = {{4, 80}, {2, 80}, {4, 0}, {2, 100}, {4, 99}};
  for (size_t size : sizes) {
    for (const Kind& k : kinds) {
      SCOPED_TRACE("size " + std::to_string(size) + " word " + std::to_string(k.word) + " zeros " +
                   std::to_string(k.zeros) + "%");
      Result r;
      transfer(with_codec(Codec::kOn), with_codec(Codec::kOn), make_data(size, k.word, k.zeros, size + k.zeros), &r,
               size % 7);
      if (size > loopback_options().inline_threshold && k.zeros >= 80) { EXPECT_LT(r.received.wire_bytes, size); }
    }
  }
}

TEST(CodecDelivery, SixtyFourMiBSparseFp32AndBf16) {
  for (unsigned word : {4u, 2u}) {
    SCOPED_TRACE("word " + std::to_string(word));
    const std::vector<char> data = make_data(64u << 20, word, 80, word);
    Result r;
    transfer(with_codec(Codec::kOn), with_codec(Codec::kAuto), data, &r);
    // d + 1/(8 word) of the logical bytes, plus headers.
    const double bound = 0.2 + 1.0 / (8.0 * word) + 0.01;
    EXPECT_LT(static_cast<double>(r.received.wire_bytes), bound * static_cast<double>(data.size()));
  }
}

TEST(CodecDelivery, SixtyFourMiBDenseWithTheCodecForcedOn) {
  const std::vector<char> data = make_data(64u << 20, 4, 0, 9);
  Result r;
  transfer(with_codec(Codec::kOn), with_codec(Codec::kOn), data, &r);
  // Raw codec frames: 24 bytes more per stripe than without the codec.
  EXPECT_EQ(r.received.wire_bytes, raw_wire(data.size()) + stripes_of(data.size()) * 24);
}

TEST(CodecDelivery, ManyMessagesInFlightMixSparseAndDense) {
  auto tx = make_transport(with_codec(Codec::kAuto));
  auto rx = make_transport(with_codec(Codec::kAuto));
  ASSERT_NE(tx, nullptr);
  ASSERT_NE(rx, nullptr);
  Pair pair;
  ASSERT_TRUE(connect_pair(*rx, *tx, &pair).ok());
  constexpr int kCount = 16;
  std::vector<std::vector<char>> out, in;
  std::vector<Request*> sends(kCount), recvs(kCount);
  for (int i = 0; i < kCount; ++i) {
    out.push_back(make_data(300000 + 4097 * i, i % 2 ? 2 : 4, i % 3 ? 80 : 0, 100 + i));
    in.emplace_back(out.back().size(), 0);
    ASSERT_TRUE(pair.recv->irecv(in[i].data(), in[i].size(), &recvs[i]).ok());
    ASSERT_TRUE(pair.send->isend(out[i].data(), out[i].size(), &sends[i]).ok());
    ASSERT_NE(sends[i], nullptr);
    ASSERT_NE(recvs[i], nullptr);
  }
  uint64_t logical = 0, wire_sent = 0, wire_received = 0;
  for (int i = 0; i < kCount; ++i) {
    Completion cs, cr;
    Status st = testing::wait_both(sends[i], &cs, recvs[i], &cr);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(in[i], out[i]) << "message " << i;
    logical += cr.size;
    wire_sent += cs.wire_bytes;
    wire_received += cr.wire_bytes;
  }
  EXPECT_EQ(wire_sent, wire_received);
  EXPECT_LT(wire_received, logical);
}

}  // namespace
}  // namespace sieve::net
