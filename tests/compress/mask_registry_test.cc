#include "compress/mask_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace sieve::compress {
namespace {

std::shared_ptr<const Mask> every_other(uint64_t count, uint64_t phase = 0) {
  auto m = std::make_shared<Mask>(count);
  for (uint64_t i = phase; i < count; i += 2) m->set_range(i, 1, true);
  return m;
}

TEST(MaskRegistry, ExactLookupSharesThePublishedMask) {
  MaskRegistry r;
  std::vector<float> buffer(100);
  auto mask = every_other(100);
  uint64_t id = 0;
  ASSERT_TRUE(r.publish(buffer.data(), 4, mask, &id).ok());
  EXPECT_NE(id, 0u);
  MaskLookup l = r.lookup(buffer.data(), 100, 4);
  EXPECT_EQ(l.mask, mask);
  EXPECT_EQ(l.entries, 1u);
  EXPECT_EQ(r.lookup(buffer.data() + 100, 10, 4).mask, nullptr);  // just past: dense
}

TEST(MaskRegistry, PublishingAgainReplacesAndOverlapsAreDropped) {
  MaskRegistry r;
  std::vector<float> buffer(100);
  uint64_t first = 0, second = 0, third = 0;
  ASSERT_TRUE(r.publish(buffer.data(), 4, every_other(50), &first).ok());
  ASSERT_TRUE(r.publish(buffer.data() + 50, 4, every_other(50), &second).ok());
  EXPECT_EQ(r.size(), 2u);
  // Covers the tail of the first and the head of the second: both are replaced.
  ASSERT_TRUE(r.publish(buffer.data() + 40, 4, std::make_shared<Mask>(20, true), &third).ok());
  EXPECT_EQ(r.size(), 1u);
  MaskEntry e;
  EXPECT_FALSE(r.find(buffer.data(), &e));
  ASSERT_TRUE(r.find(buffer.data() + 40, &e));
  EXPECT_EQ(e.id, third);
  EXPECT_NE(third, first);
  EXPECT_EQ(r.retract(buffer.data() + 50).code(), Code::kNotFound);
  EXPECT_TRUE(r.retract(buffer.data() + 40).ok());
  EXPECT_EQ(r.size(), 0u);
}

TEST(MaskRegistry, LookupComposesSeveralMasksAndTreatsGapsAsDense) {
  MaskRegistry r;
  std::vector<float> bucket(100);
  // Two "parameters" inside a bucket, a gap between them: [10, 30) and [50, 70).
  ASSERT_TRUE(r.publish(bucket.data() + 10, 4, std::make_shared<Mask>(20, false), nullptr).ok());
  ASSERT_TRUE(r.publish(bucket.data() + 50, 4, every_other(20, 1), nullptr).ok());
  MaskLookup l = r.lookup(bucket.data(), 100, 4);
  ASSERT_NE(l.mask, nullptr);
  EXPECT_EQ(l.entries, 2u);
  for (uint64_t i = 0; i < 100; ++i) {
    bool expect = true;
    if (i >= 10 && i < 30) expect = false;
    if (i >= 50 && i < 70) expect = (i - 50) % 2 == 1;
    EXPECT_EQ(l.mask->test(i), expect) << i;
  }
  // A lookup starting inside a published buffer.
  l = r.lookup(bucket.data() + 20, 40, 4);
  ASSERT_NE(l.mask, nullptr);
  for (uint64_t i = 0; i < 40; ++i) EXPECT_EQ(l.mask->test(i), i >= 10 && !(i >= 30 && (i - 30) % 2 == 0)) << i;
}

TEST(MaskRegistry, OtherElementSizesAreConservative) {
  MaskRegistry r;
  std::vector<uint16_t> buffer(64);
  // bf16 mask: elements 0-3 pruned, 4 kept, 5-63 pruned.
  auto m = std::make_shared<Mask>(64);
  m->set_range(4, 1, true);
  ASSERT_TRUE(r.publish(buffer.data(), 2, m, nullptr).ok());
  // Viewed as 32-bit words: word 2 holds elements 4 and 5, so it is kept; the rest pruned.
  MaskLookup l = r.lookup(buffer.data(), 32, 4);
  ASSERT_NE(l.mask, nullptr);
  for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(l.mask->test(i), i == 2) << i;
  // Misaligned by one byte: elements straddle published elements; any kept byte keeps.
  l = r.lookup(reinterpret_cast<const uint8_t*>(buffer.data()) + 1, 31, 4);
  ASSERT_NE(l.mask, nullptr);
  for (uint64_t i = 0; i < 31; ++i) EXPECT_EQ(l.mask->test(i), i == 1 || i == 2) << i;
  // A tail element only partly covered stays kept (its uncovered bytes count as dense).
  l = r.lookup(reinterpret_cast<const uint8_t*>(buffer.data()) + 126, 2, 4);
  ASSERT_NE(l.mask, nullptr);
  EXPECT_TRUE(l.mask->test(0));
  EXPECT_TRUE(l.mask->test(1));
}

TEST(MaskRegistry, BadInputIsRefused) {
  MaskRegistry r;
  int x = 0;
  EXPECT_EQ(r.publish(nullptr, 4, every_other(4), nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(&x, 0, every_other(4), nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(&x, 4, nullptr, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(&x, 4, std::make_shared<Mask>(0), nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(reinterpret_cast<void*>(~uintptr_t{0} - 8), 4, every_other(4), nullptr).code(), Code::kOutOfRange);
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.lookup(nullptr, 4, 4).mask, nullptr);
}

// Publishers replace masks while readers look up: every lookup must see one whole mask (all of
// phase 0 or all of phase 1), never a mixture. Run under ThreadSanitizer in CI's TSan build.
TEST(MaskRegistry, ConcurrentPublishAndLookupSeeWholeMasks) {
  MaskRegistry r;
  std::vector<float> buffers(4 * 256);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0}, torn{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < 2000; ++i) {
        const int b = (i + w) % 4;
        r.publish(buffers.data() + 256 * b, 4, every_other(256, uint64_t(i % 2)), nullptr);
        if (i % 7 == 0) r.retract(buffers.data() + 256 * b);
      }
    });
  for (int rd = 0; rd < 2; ++rd)
    threads.emplace_back([&] {
      for (int round = 0; round < 200 || !stop.load(); ++round) {  // some rounds even if writers finish first
        for (int b = 0; b < 4; ++b) {
          MaskLookup l = r.lookup(buffers.data() + 256 * b, 256, 4);
          lookups.fetch_add(1);
          if (!l.mask) continue;
          const bool phase = l.mask->test(1);
          for (uint64_t i = 0; i < 256; ++i)
            if (l.mask->test(i) != ((i % 2 == 1) == phase)) torn.fetch_add(1);
        }
        MaskLookup whole = r.lookup(buffers.data(), 4 * 256, 4);  // composed across entries
        if (whole.mask) {
          EXPECT_EQ(whole.mask->count(), 1024u);
        }
      }
    });
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_GT(lookups.load(), 0u);
  EXPECT_EQ(torn.load(), 0u);
}

}  // namespace
}  // namespace sieve::compress
