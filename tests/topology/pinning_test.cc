// SPDX-License-Identifier: Apache-2.0
// Thread placement: the auto rule, and pinning that reports instead of failing hard.
#include <gtest/gtest.h>

#include <thread>

#include "topology/pinning.h"

namespace sieve::topology {
namespace {

TEST(ShouldPin, AutoPinsOnlyOnMultiNumaMachines) {
  EXPECT_FALSE(should_pin(PinChoice::kAuto, 1));
  EXPECT_TRUE(should_pin(PinChoice::kAuto, 2));
  EXPECT_TRUE(should_pin(PinChoice::kOn, 1));
  EXPECT_FALSE(should_pin(PinChoice::kOff, 8));
}

TEST(PinThread, PinsAThreadToAnAllowedCpu) {
  const std::vector<int> allowed = thread_cpus(pthread_self());
  ASSERT_FALSE(allowed.empty());
  std::string error = "not run";
  std::vector<int> after;
  std::thread worker([&] {
    error = pin_current_thread_to({allowed.back()});
    after = thread_cpus(pthread_self());
  });
  worker.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(after, std::vector<int>{allowed.back()});
}

TEST(PinThread, KeepsOnlyTheAllowedPartOfTheSet) {
  const std::vector<int> allowed = thread_cpus(pthread_self());
  ASSERT_FALSE(allowed.empty());
  std::vector<int> wanted = allowed;
  wanted.push_back(1000);  // a CPU this machine does not have
  std::string error = "not run";
  std::vector<int> after;
  std::thread worker([&] {
    error = pin_current_thread_to(wanted);
    after = thread_cpus(pthread_self());
  });
  worker.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(after, allowed);
}

TEST(PinThread, ReportsImpossibleSetsWithoutChangingAnything) {
  const std::vector<int> before = thread_cpus(pthread_self());
  std::string error;
  std::vector<int> after;
  std::thread worker([&] {
    error = pin_current_thread_to({1001, 1002});
    EXPECT_NE(error.find("1001-1002"), std::string::npos) << error;
    error = pin_current_thread_to({});
    EXPECT_NE(error, "");
    error = pin_current_thread_to({-1});
    EXPECT_NE(error.find("out of range"), std::string::npos) << error;
    after = thread_cpus(pthread_self());
  });
  worker.join();
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace sieve::topology
