// SIEVE_IB_TC, SIEVE_IB_SL and SIEVE_IB_PKEY fall back to NCCL's variables of the same meaning, as
// NCCL parses them, and never to a value NCCL's own transport would refuse.
#include "plugin/net/nccl_fallbacks.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace sieve::plugin {
namespace {

EnvironmentLookup environment(const std::map<std::string, std::string>& values) {
  return [values](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(NcclFallbacks, TheSieveValueWinsWhenSet) {
  EXPECT_EQ(sieve_or_nccl(3, "NCCL_IB_SL", 0, 15, -1, environment({{"NCCL_IB_SL", "5"}})), 3);
  EXPECT_EQ(sieve_or_nccl(0, "NCCL_IB_TC", 0, 255, -1, environment({{"NCCL_IB_TC", "106"}})), 0);
}

TEST(NcclFallbacks, NcclsValueServesWhereSieveLeavesItUnset) {
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_TC", 0, 255, -1, environment({{"NCCL_IB_TC", "106"}})), 106);
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_TC", 0, 255, -1, environment({{"NCCL_IB_TC", "0x68"}})), 0x68);
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_PKEY", 0, 65535, 0, environment({{"NCCL_IB_PKEY", "2"}})), 2);
}

TEST(NcclFallbacks, NeitherSetGivesTheFallback) {
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_TC", 0, 255, -1, environment({})), -1);
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_PKEY", 0, 65535, 0, environment({{"NCCL_IB_PKEY", ""}})), 0);
}

TEST(NcclFallbacks, AnNcclValueThatDoesNotParseOrFitIsIgnored) {
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_SL", 0, 15, -1, environment({{"NCCL_IB_SL", "16"}})), -1);
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_SL", 0, 15, -1, environment({{"NCCL_IB_SL", "high"}})), -1);
  EXPECT_EQ(sieve_or_nccl(-1, "NCCL_IB_TC", 0, 255, -1, environment({{"NCCL_IB_TC", "-4"}})), -1);
}

}  // namespace
}  // namespace sieve::plugin
