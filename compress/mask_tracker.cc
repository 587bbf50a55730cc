// SPDX-License-Identifier: Apache-2.0
#include "compress/mask_tracker.h"

#include <algorithm>

namespace sieve::compress {

const char* track_state_name(TrackState state) {
  switch (state) {
    case TrackState::kLearning: return "learning";
    case TrackState::kStable: return "stable";
    case TrackState::kDrifted: return "drifted";
  }
  return "unknown";
}

MaskTracker::MaskTracker(uint32_t stable_after) : stable_after_(std::max<uint32_t>(1, stable_after)) {}

void MaskTracker::reset() {
  state_ = TrackState::kLearning;
  streak_ = 0;
  observations_ = 0;
  candidate_.reset();
}

TrackUpdate MaskTracker::observe(const Mask& nonzero) {
  TrackUpdate update;
  ++observations_;
  if (candidate_ && candidate_->count() != nonzero.count()) {
    // A different buffer size is a different buffer: nothing learned so far applies.
    update.size_changed = true;
    state_ = TrackState::kLearning;
    candidate_.reset();
  }
  if (!candidate_) {
    candidate_ = std::make_shared<const Mask>(nonzero);
    streak_ = 1;
  } else if (state_ == TrackState::kStable) {
    const auto& mask = candidate_->words();
    const auto& seen = nonzero.words();
    for (size_t w = 0; w < mask.size(); ++w) {
      update.newly_nonzero += uint64_t(__builtin_popcountll(seen[w] & ~mask[w]));
      update.newly_zero += uint64_t(__builtin_popcountll(mask[w] & ~seen[w]));
    }
    if (update.newly_nonzero) {
      update.drifted = true;
      state_ = TrackState::kDrifted;
      candidate_ = std::make_shared<const Mask>(nonzero);
      streak_ = 1;
    } else {
      ++streak_;
    }
  } else if (*candidate_ == nonzero) {
    ++streak_;
  } else {
    candidate_ = std::make_shared<const Mask>(nonzero);
    streak_ = 1;
  }
  if (state_ != TrackState::kStable && !update.drifted && streak_ >= stable_after_) {
    state_ = TrackState::kStable;
    update.became_stable = true;
  }
  update.state = state_;
  return update;
}

}  // namespace sieve::compress
