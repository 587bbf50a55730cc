// SPDX-License-Identifier: Apache-2.0
#include "compress/mask_tracker.h"

#include <gtest/gtest.h>

#include <vector>

namespace sieve::compress {
namespace {

Mask pattern(uint64_t count, std::initializer_list<uint64_t> nonzero) {
  Mask m(count);
  for (uint64_t i : nonzero) m.set_range(i, 1, true);
  return m;
}

TEST(MaskTracker, StableAfterKIdenticalObservations) {
  MaskTracker t(3);
  const Mask p = pattern(100, {1, 5, 99});
  EXPECT_EQ(t.observe(p).state, TrackState::kLearning);
  EXPECT_EQ(t.observe(p).state, TrackState::kLearning);
  EXPECT_EQ(t.stable_mask(), nullptr);
  TrackUpdate u = t.observe(p);
  EXPECT_EQ(u.state, TrackState::kStable);
  EXPECT_TRUE(u.became_stable);
  ASSERT_NE(t.stable_mask(), nullptr);
  EXPECT_EQ(*t.stable_mask(), p);
  EXPECT_FALSE(t.observe(p).became_stable);  // reported once
}

TEST(MaskTracker, ADifferentObservationRestartsTheStreak) {
  MaskTracker t(3);
  const Mask a = pattern(10, {1}), b = pattern(10, {2});
  t.observe(a);
  t.observe(a);
  t.observe(b);
  EXPECT_EQ(t.streak(), 1u);
  t.observe(b);
  EXPECT_EQ(t.observe(b).state, TrackState::kStable);
  EXPECT_EQ(*t.stable_mask(), b);
}

TEST(MaskTracker, FewerNonzerosFitTheStableMaskNewOnesAreDrift) {
  MaskTracker t(2);
  const Mask p = pattern(64, {0, 10, 20, 30});
  t.observe(p);
  t.observe(p);
  ASSERT_EQ(t.state(), TrackState::kStable);
  TrackUpdate u = t.observe(pattern(64, {0, 10}));  // two kept elements happen to be zero
  EXPECT_EQ(u.state, TrackState::kStable);
  EXPECT_EQ(u.newly_zero, 2u);
  EXPECT_EQ(u.newly_nonzero, 0u);
  EXPECT_FALSE(u.drifted);

  u = t.observe(pattern(64, {0, 10, 20, 30, 40, 63}));  // 40 and 63 were pruned
  EXPECT_TRUE(u.drifted);
  EXPECT_EQ(u.state, TrackState::kDrifted);
  EXPECT_EQ(u.newly_nonzero, 2u);
  EXPECT_EQ(t.stable_mask(), nullptr);  // the proxy must stop compacting at once
  // Relearning from the new pattern.
  u = t.observe(pattern(64, {0, 10, 20, 30, 40, 63}));
  EXPECT_EQ(u.state, TrackState::kStable);
  EXPECT_TRUE(u.became_stable);
}

TEST(MaskTracker, LearnsFromHostBuffersZeroPatterns) {
  // Pruned weights' gradients are exactly +0.0 or -0.0: both zero for floating-point data.
  std::vector<float> grad = {0.5f, 0.0f, -0.0f, 2.0f, 0.0f};
  EXPECT_EQ(Mask::from_nonzero(grad.data(), grad.size(), sizeof(float)), pattern(5, {0, 2, 3}));
  const Mask seen = Mask::from_nonzero(grad.data(), grad.size(), sizeof(float), true);
  EXPECT_EQ(seen, pattern(5, {0, 3}));
  const uint8_t bytes[] = {0, 0x80, 1};
  EXPECT_EQ(Mask::from_nonzero(bytes, 3, 1), pattern(3, {1, 2}));
  std::vector<uint16_t> bf16 = {0, 0x3f80, 0, 0};
  EXPECT_EQ(Mask::from_nonzero(bf16.data(), 4, 2), pattern(4, {1}));
  MaskTracker t(2);
  t.observe(seen);
  EXPECT_EQ(t.observe(Mask::from_nonzero(grad.data(), grad.size(), 4, true)).state, TrackState::kStable);
}

TEST(MaskTracker, SizeChangeAndResetStartOver) {
  MaskTracker t(1);
  EXPECT_EQ(t.observe(pattern(8, {1})).state, TrackState::kStable);
  TrackUpdate u = t.observe(pattern(16, {1}));
  EXPECT_TRUE(u.size_changed);
  EXPECT_EQ(u.state, TrackState::kStable);  // K = 1: the first observation of the new size suffices
  t.reset();
  EXPECT_EQ(t.state(), TrackState::kLearning);
  EXPECT_EQ(t.observations(), 0u);
  EXPECT_STREQ(track_state_name(TrackState::kDrifted), "drifted");
  MaskTracker zero(0);  // treated as 1
  EXPECT_EQ(zero.observe(pattern(8, {})).state, TrackState::kStable);
}

}  // namespace
}  // namespace sieve::compress
