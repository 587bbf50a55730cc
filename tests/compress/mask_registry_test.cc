// SPDX-License-Identifier: Apache-2.0
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

TEST(MaskRegistry, FindReturnsWhatWasPublishedWithItsDtype) {
  MaskRegistry r;
  std::vector<uint16_t> buffer(100);
  auto mask = every_other(100);
  uint64_t id = 0;
  ASSERT_TRUE(r.publish(buffer.data(), DType::kBF16, mask, &id).ok());
  EXPECT_NE(id, 0u);
  auto e = r.find(buffer.data());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mask(), mask);
  EXPECT_EQ(e->dtype(), DType::kBF16) << "not the first dtype of the same width (F16)";
  EXPECT_EQ(e->id(), id);
  EXPECT_EQ(r.find(buffer.data() + 1), nullptr);
}

TEST(MaskRegistry, PublishingOverAnEntryUnstagesItAndOverlapsAreDropped) {
  MaskRegistry r;
  std::vector<float> buffer(100);
  uint64_t first = 0, second = 0, third = 0;
  ASSERT_TRUE(r.publish(buffer.data(), DType::kF32, every_other(50), &first).ok());
  ASSERT_TRUE(r.publish(buffer.data() + 50, DType::kF32, every_other(50), &second).ok());
  EXPECT_EQ(r.size(), 2u);
  // Covers the tail of the first and the head of the second: both are replaced.
  ASSERT_TRUE(r.publish(buffer.data() + 40, DType::kF32, std::make_shared<Mask>(20, true), &third).ok());
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.find(buffer.data()), nullptr);
  auto c = r.find(buffer.data() + 40);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id(), third);
  EXPECT_EQ(r.retract(buffer.data() + 50).code(), Code::kNotFound);
  EXPECT_TRUE(r.retract(buffer.data() + 40).ok());
  EXPECT_EQ(r.size(), 0u);
}

TEST(MaskRegistry, RetractByIdLeavesANewerMaskAtTheSameAddressAlone) {
  MaskRegistry r;
  std::vector<float> buffer(64);
  uint64_t old_id = 0, new_id = 0;
  ASSERT_TRUE(r.publish(buffer.data(), DType::kF32, every_other(64), &old_id).ok());
  ASSERT_TRUE(r.publish(buffer.data(), DType::kF32, every_other(64, 1), &new_id).ok());
  // A late finalizer of the old tensor:
  EXPECT_EQ(r.retract_id(old_id).code(), Code::kNotFound);
  ASSERT_NE(r.find(buffer.data()), nullptr);
  EXPECT_TRUE(r.retract_id(new_id).ok());
  EXPECT_EQ(r.find(buffer.data()), nullptr);
}

TEST(MaskRegistry, ASnapshotListsTheStagedEntriesInPublishOrder) {
  MaskRegistry r;
  std::vector<float> low(32), high(32);
  EXPECT_TRUE(r.snapshot().empty());
  // Published high first: the order is the publish order, not the address order.
  ASSERT_TRUE(r.publish(high.data(), DType::kF32, every_other(32), nullptr).ok());
  ASSERT_TRUE(r.publish(low.data(), DType::kF32, every_other(32, 1), nullptr).ok());
  StagedEntries taken = r.snapshot();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0]->base(), reinterpret_cast<uintptr_t>(high.data()));
  EXPECT_EQ(taken[1]->base(), reinterpret_cast<uintptr_t>(low.data()));
  // A later retract unstages the entry; what a commit already took is immutable.
  ASSERT_TRUE(r.retract(high.data()).ok());
  EXPECT_EQ(r.snapshot().size(), 1u);
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0]->count(), 32u);
}

// A binding frees a retracted buffer only once no agreed table can still compact it.
TEST(MaskRegistry, ARetractedMaskIsReleasedWhenNoTableHoldsIt) {
  MaskRegistry r;
  std::vector<float> buffer(32);
  uint64_t id = 0;
  ASSERT_TRUE(r.publish(buffer.data(), DType::kF32, every_other(32), &id).ok());
  bool released = true;
  ASSERT_TRUE(r.released(id, &released).ok());
  EXPECT_FALSE(released) << "staged";
  StagedEntries table = r.snapshot();  // what an agreed table holds
  ASSERT_TRUE(r.retract(buffer.data()).ok());
  ASSERT_TRUE(r.released(id, &released).ok());
  EXPECT_FALSE(released) << "retracted, but a table still holds it";
  table.clear();  // the communicator's next commit replaced its table
  ASSERT_TRUE(r.released(id, &released).ok());
  EXPECT_TRUE(released);
  EXPECT_EQ(r.released(id + 1, &released).code(), Code::kNotFound);
  EXPECT_EQ(r.released(0, &released).code(), Code::kNotFound);
}

TEST(MaskRegistry, RefusesWhatCannotBeABuffer) {
  MaskRegistry r;
  std::vector<float> buffer(4);
  EXPECT_EQ(r.publish(nullptr, DType::kF32, every_other(4), nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(buffer.data(), DType::kF32, nullptr, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(r.publish(buffer.data(), DType::kF32, std::make_shared<Mask>(0), nullptr).code(), Code::kInvalidArgument);
  // A buffer whose end wraps around the address space.
  const void* high = reinterpret_cast<const void*>(~uintptr_t(0) - 8);
  EXPECT_EQ(r.publish(high, DType::kF64, every_other(4), nullptr).code(), Code::kOutOfRange);
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.generation(), 0u) << "refused calls change nothing";
}

TEST(MaskRegistry, ConcurrentPublishersAndReadersSeeWholeEntries) {
  MaskRegistry r;
  std::vector<float> buffers(8 * 256);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      for (int b = 0; b < 8; ++b) {
        auto e = r.find(buffers.data() + 256 * b);
        if (e) {
          ASSERT_EQ(e->count(), 256u);
          ASSERT_EQ(e->mask()->kept(), 128u);
        }
      }
      r.snapshot();
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 500; ++i) {
        const int b = (i + w) % 8;
        ASSERT_TRUE(r.publish(buffers.data() + 256 * b, DType::kF32, every_other(256, uint64_t(i % 2)), nullptr).ok());
        if (i % 7 == 0) r.snapshot();
        // Another writer may have retracted this buffer first: either answer is right here.
        if (i % 5 == 0) (void)r.retract(buffers.data() + 256 * b);
      }
    });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_LE(r.size(), 8u);
}

}  // namespace
}  // namespace sieve::compress
