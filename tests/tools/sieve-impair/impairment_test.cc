// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-impair/impairment.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sieve::impair {
namespace {

TEST(ImpairmentOptions, ProbabilitiesArePercentagesOrFractions) {
  double p = -1;
  std::string error;
  ASSERT_TRUE(parse_probability("1%", &p, &error)) << error;
  EXPECT_DOUBLE_EQ(p, 0.01);
  ASSERT_TRUE(parse_probability("0.5%", &p, &error)) << error;
  EXPECT_DOUBLE_EQ(p, 0.005);
  ASSERT_TRUE(parse_probability("0.25", &p, &error)) << error;
  EXPECT_DOUBLE_EQ(p, 0.25);
  for (const char* bad : {"", "%", "abc", "1%%", "101%", "-1%", "2", "nan"}) {
    error.clear();
    EXPECT_FALSE(parse_probability(bad, &p, &error)) << bad;
    EXPECT_NE(error.find(bad), std::string::npos) << "the error names the bad value: " << error;
  }
}

TEST(ImpairmentOptions, DurationsTakeUnitsAndDefaultToMilliseconds) {
  int64_t us = -1;
  std::string error;
  ASSERT_TRUE(parse_duration_us("5ms", &us, &error)) << error;
  EXPECT_EQ(us, 5000);
  ASSERT_TRUE(parse_duration_us("250us", &us, &error)) << error;
  EXPECT_EQ(us, 250);
  ASSERT_TRUE(parse_duration_us("1s", &us, &error)) << error;
  EXPECT_EQ(us, 1000000);
  ASSERT_TRUE(parse_duration_us("0.5", &us, &error)) << error;
  EXPECT_EQ(us, 500);
  for (const char* bad : {"", "ms", "5m", "-1ms", "61s", "1h"})
    EXPECT_FALSE(parse_duration_us(bad, &us, &error)) << bad;
}

TEST(ImpairmentOptions, InconsistentCombinationsAreRefused) {
  ImpairmentOptions o;
  EXPECT_EQ(validate(o), "");
  o.delay_us = 1000;
  o.jitter_us = 2000;
  EXPECT_NE(validate(o), "") << "jitter larger than the delay";
  o = {};
  o.reorder = 0.25;
  EXPECT_NE(validate(o), "") << "reordering without a delay";
}

TEST(Impairment, NoOptionsSendsEverythingAtOnce) {
  Impairment none(ImpairmentOptions{});
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(none.decide(i).fate, Fate::kSendNow);
}

TEST(Impairment, ASeedFixesTheWholeSchedule) {
  ImpairmentOptions o;
  o.loss = 0.1;
  o.delay_us = 2000;
  o.jitter_us = 1000;
  o.reorder = 0.25;
  o.seed = 42;
  Impairment a(o), b(o);
  o.seed = 43;
  Impairment c(o);
  int differences = 0;
  for (int i = 0; i < 1000; ++i) {
    const Decision x = a.decide(i), y = b.decide(i), z = c.decide(i);
    EXPECT_EQ(x.fate, y.fate);
    EXPECT_EQ(x.release_us, y.release_us);
    differences += x.fate != z.fate || x.release_us != z.release_us;
  }
  EXPECT_GT(differences, 100) << "another seed gives another schedule";
}

TEST(Impairment, FatesFollowTheRequestedRatesAndDelays) {
  ImpairmentOptions o;
  o.loss = 0.01;
  o.delay_us = 2000;
  o.jitter_us = 1000;
  o.reorder = 0.25;
  Impairment impairment(o);
  const int n = 200000;
  int dropped = 0, reordered = 0, held = 0;
  int64_t earliest = INT64_MAX, latest = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t now = 1000000 + i;
    const Decision d = impairment.decide(now);
    if (d.fate == Fate::kDrop) {
      ++dropped;
    } else if (d.fate == Fate::kSendNow) {
      EXPECT_TRUE(d.reordered) << "with a delay, only reordered packets leave at once";
      ++reordered;
    } else {
      ++held;
      earliest = std::min(earliest, d.release_us - now);
      latest = std::max(latest, d.release_us - now);
    }
  }
  // Binomial spreads at n = 200000 are under 0.05 % (loss) and 0.1 % (reorder); the bounds are 5x that.
  EXPECT_NEAR(dropped / double(n), 0.01, 0.0025);
  EXPECT_NEAR(reordered / double(n - dropped), 0.25, 0.005);
  EXPECT_EQ(dropped + reordered + held, n);
  EXPECT_GE(earliest, 1000);
  EXPECT_LE(latest, 3000);
  EXPECT_LT(earliest, 1050) << "the jitter spans its whole range";
  EXPECT_GT(latest, 2950);
}

}  // namespace
}  // namespace sieve::impair
