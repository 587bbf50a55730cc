// SPDX-License-Identifier: Apache-2.0
// The communicator's call history that hang reports print: each record reads back as it was noted,
// with its element type (any of compress::DType's) or none for a call the proxy passed through.
#include "plugin/proxy/call_history.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace sieve::plugin::proxy {
namespace {

TEST(CallHistory, EveryElementTypeAndAPassedThroughCallReadBackAsNoted) {
  std::vector<std::optional<DType>> types;
  for (int t = 0; t < compress::kDTypeCount; ++t) types.push_back(DType(t));
  types.push_back(std::nullopt);
  CallHistory history;
  for (const std::optional<DType>& type : types) {
    CallRecord r;
    r.kind = CallKind::kAllReduce;
    r.op = ReduceOp::kSum;
    r.type = type;
    r.count = 64;
    history.add(r);
  }
  const std::vector<CallRecord> recent = history.recent();
  ASSERT_EQ(recent.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(recent[i].type, types[i]) << describe(recent[i]);
    const std::string name = types[i] ? compress::dtype_name(*types[i]) : "other";
    EXPECT_NE(describe(recent[i]).find(" sum " + name + " x 64 "), std::string::npos) << describe(recent[i]);
  }
}

}  // namespace
}  // namespace sieve::plugin::proxy
