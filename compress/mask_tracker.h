// SPDX-License-Identifier: Apache-2.0
// Learns a buffer's mask from its zeros (PacTrain's idea): fed the nonzero pattern of successive
// observations of one buffer (all-reduce outputs, identical on every rank), it declares the pattern
// stable after K identical observations in a row. Once stable, an observation with fewer nonzeros
// still fits the mask (a kept element that happens to be zero costs nothing); one with a nonzero
// where the mask prunes is drift: the mask is dropped and learning starts again from that pattern.
// Pure logic, no clocks and no threads: callers feed it at a fixed lag so every rank agrees.
#pragma once

#include <cstdint>
#include <memory>

#include "compress/mask.h"

namespace sieve::compress {

enum class TrackState {
  kLearning,  // fewer than K identical observations so far
  kStable,    // the pattern held K times; stable_mask() is valid
  kDrifted,   // was stable, a pruned position became nonzero; relearning
};

const char* track_state_name(TrackState state);

struct TrackUpdate {
  TrackState state = TrackState::kLearning;
  bool became_stable = false;  // this observation completed K identical ones
  bool drifted = false;        // this observation broke a stable mask
  uint64_t newly_nonzero = 0;  // nonzero here, pruned by the stable mask (drift when > 0)
  uint64_t newly_zero = 0;     // zero here, kept by the stable mask (harmless)
  bool size_changed = false;   // the buffer's element count changed: learning restarted
};

class MaskTracker {
 public:
  // K = stable_after (at least 1; 0 is treated as 1).
  explicit MaskTracker(uint32_t stable_after);

  // `nonzero`: bit i set when element i was nonzero in this observation.
  TrackUpdate observe(const Mask& nonzero);
  void reset();

  TrackState state() const { return state_; }
  uint32_t streak() const { return streak_; }
  uint64_t observations() const { return observations_; }
  // The learned mask while state() == kStable, else null.
  std::shared_ptr<const Mask> stable_mask() const { return state_ == TrackState::kStable ? candidate_ : nullptr; }

 private:
  uint32_t stable_after_;
  TrackState state_ = TrackState::kLearning;
  uint32_t streak_ = 0;
  uint64_t observations_ = 0;
  std::shared_ptr<const Mask> candidate_;
};

}  // namespace sieve::compress
