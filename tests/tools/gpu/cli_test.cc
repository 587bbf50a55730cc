// SPDX-License-Identifier: Apache-2.0
// The GPU kit's programs read sizes one way (tools/gpu/cli.h): what each accepts and refuses.
#include "tools/gpu/cli.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sieve::tools::gpu {
namespace {

TEST(GpuCli, SizesTakeKMGSuffixesInEitherCase) {
  size_t v = 0;
  ASSERT_TRUE(parse_size("4096", &v));
  EXPECT_EQ(v, 4096u);
  ASSERT_TRUE(parse_size("256K", &v));
  EXPECT_EQ(v, 256u << 10);
  ASSERT_TRUE(parse_size("1m", &v));
  EXPECT_EQ(v, 1u << 20);
  ASSERT_TRUE(parse_size("3G", &v));
  EXPECT_EQ(v, size_t(3) << 30);
}

TEST(GpuCli, BadSizesAreRefusedAndLeaveTheValue) {
  for (const std::string& bad :
       std::vector<std::string>{"", "0", "0K", "-1", "+5", "1T", "1KB", "12x", "K", "99999999999999999999",
                                std::to_string(SIZE_MAX / 1024 + 1) + "K"}) {
    size_t v = 7;
    EXPECT_FALSE(parse_size(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 7u) << "'" << bad << "'";
  }
}

TEST(GpuCli, FailNamesTheProgramAndRankAndExitsOne) {
  int rank = 3;
  set_fail_context("sieve-test-tool", &rank);
  EXPECT_EXIT(
      size_option("--count", "lots"), testing::ExitedWithCode(1),
      "sieve-test-tool rank 3: FAIL: --count: bad size 'lots' \\(a positive number, optionally with K, M or G\\)");
  EXPECT_EQ(size_option("--count", "2K"), 2048u);
}

}  // namespace
}  // namespace sieve::tools::gpu
