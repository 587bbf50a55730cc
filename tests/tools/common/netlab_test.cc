// SPDX-License-Identifier: Apache-2.0
// NetLab's reading of a node's shaper: the tbf's held-back count from `tc -s qdisc`, and -1 where
// the node has no tbf (the live half needs root and network namespaces; skipped otherwise).
#include <gtest/gtest.h>

#include "tools/common/netlab.h"

namespace sieve::tools {
namespace {

TEST(TbfOverlimits, ReadsTheTbfLineAndNothingElse) {
  EXPECT_EQ(tbf_overlimits("qdisc tbf 10: root refcnt 3 rate 10Gbit burst 4998750b lat 50ms \n"
                           " Sent 34115882089 bytes 22575204 pkt (dropped 0, overlimits 32847 requeues 0) \n"
                           " backlog 0b 0p requeues 0\n"),
            32847);
  // netem under the tbf: the tbf's own count, not its child's.
  EXPECT_EQ(tbf_overlimits("qdisc tbf 10: root refcnt 3 rate 1Gbit burst 499875b lat 50ms \n"
                           " Sent 100 bytes 2 pkt (dropped 0, overlimits 7 requeues 0) \n"
                           "qdisc netem 20: parent 10:1 limit 1000 delay 1ms\n"
                           " Sent 100 bytes 2 pkt (dropped 0, overlimits 99 requeues 0) \n"),
            7);
  EXPECT_EQ(
      tbf_overlimits("qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)\n"),
      -1);
  EXPECT_EQ(tbf_overlimits("qdisc tbf 10: root refcnt 3 rate 1Gbit\nqdisc netem 20: parent 10:1\n"
                           " Sent 1 bytes 1 pkt (dropped 0, overlimits 5 requeues 0)\n"),
            -1)
      << "a count that belongs to the next qdisc is not the tbf's";
  EXPECT_EQ(tbf_overlimits(""), -1);
  EXPECT_EQ(tbf_overlimits("qdisc tbf 10: root\n Sent 0 bytes 0 pkt (dropped 0, overlimits x requeues 0)\n"), -1);
}

TEST(NetLab, AShapedNodeReportsItsShaperAndAnUnshapedOneNone) {
  const std::string why = NetLab::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  NetLab shaped(2, "--p2p --rate 1gbit");
  ASSERT_TRUE(shaped.ok()) << shaped.error();
  EXPECT_GE(shaped.shaper_holds(1), 0);
  NetLab unshaped(2, "--p2p");
  ASSERT_TRUE(unshaped.ok()) << unshaped.error();
  EXPECT_EQ(unshaped.shaper_holds(1), -1);
}

}  // namespace
}  // namespace sieve::tools
