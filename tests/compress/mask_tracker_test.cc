#include "compress/mask_tracker.h"

#include <gtest/gtest.h>

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
