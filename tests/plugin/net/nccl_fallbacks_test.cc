// SPDX-License-Identifier: Apache-2.0
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

// A cluster tuned for NCCL's IB transport: each NCCL_IB_* twin decides where the SIEVE_IB_*
// variable is not set, and what decided is reported per setting (sieve-info shows it).
const SharedSetting& decided(const std::vector<SharedSetting>& all, const std::string& sieve_name) {
  for (const SharedSetting& s : all)
    if (sieve_name == s.sieve_name) return s;
  ADD_FAILURE() << sieve_name << " not reported";
  return all.front();
}

TEST(ResolveIbOptions, NcclVariablesDecideWhereSieveOnesAreUnset) {
  const config::Registry registry({});
  net::TransportOptions o;
  const auto all = resolve_ib_options(registry,
                                      environment({{"NCCL_IB_HCA", "=mlx5_2:1"},
                                                   {"NCCL_IB_GID_INDEX", "3"},
                                                   {"NCCL_IB_TIMEOUT", "22"},
                                                   {"NCCL_IB_RETRY_CNT", "5"},
                                                   {"NCCL_IB_QPS_PER_CONNECTION", "4"},
                                                   {"NCCL_IB_ADDR_FAMILY", "AF_INET6"},
                                                   {"NCCL_IB_ADDR_RANGE", "fd00::/8"},
                                                   {"NCCL_IB_AR_THRESHOLD", "65536"},
                                                   {"NCCL_IB_TC", "106"}}),
                                      &o);
  EXPECT_EQ(o.ib_hca, "=mlx5_2:1");
  EXPECT_EQ(o.ib_gid_index, 3);
  EXPECT_EQ(o.ib_timeout, 22);
  EXPECT_EQ(o.ib_retry_count, 5);
  EXPECT_EQ(o.ib_qps, 4);
  EXPECT_EQ(o.ib_addr_family, net::Family::kIPv6);
  EXPECT_EQ(o.ib_addr_range, "fd00::/8");
  EXPECT_EQ(o.ib_ar_threshold, 65536);
  EXPECT_EQ(o.ib_traffic_class, 106);
  for (const char* name :
       {"SIEVE_IB_HCA", "SIEVE_IB_GID_INDEX", "SIEVE_IB_TIMEOUT", "SIEVE_IB_RETRY_CNT", "SIEVE_IB_QPS",
        "SIEVE_IB_ADDR_FAMILY", "SIEVE_IB_ADDR_RANGE", "SIEVE_IB_AR_THRESHOLD", "SIEVE_IB_TC"})
    EXPECT_EQ(decided(all, name).origin, Origin::kNccl) << name;
  EXPECT_EQ(decided(all, "SIEVE_IB_TIMEOUT").value, "22");
  EXPECT_EQ(decided(all, "SIEVE_IB_SL").origin, Origin::kDefault);
}

TEST(ResolveIbOptions, SieveVariablesWinEvenAtTheirDefaultValue) {
  const config::Registry registry({{"SIEVE_IB_TIMEOUT", "20"},
                                   {"SIEVE_IB_QPS", "2"},
                                   {"SIEVE_IB_HCA", "mlx5_0"},
                                   {"SIEVE_IB_ADDR_FAMILY", "any"},
                                   {"SIEVE_IB_AR_THRESHOLD", "16K"}});
  net::TransportOptions o;
  const auto all = resolve_ib_options(registry,
                                      environment({{"NCCL_IB_TIMEOUT", "23"},
                                                   {"NCCL_IB_QPS_PER_CONNECTION", "8"},
                                                   {"NCCL_IB_HCA", "mlx5_3"},
                                                   {"NCCL_IB_ADDR_FAMILY", "AF_INET"},
                                                   {"NCCL_IB_AR_THRESHOLD", "0"}}),
                                      &o);
  EXPECT_EQ(o.ib_timeout, 20);
  EXPECT_EQ(o.ib_qps, 2);
  EXPECT_EQ(o.ib_hca, "mlx5_0");
  EXPECT_EQ(o.ib_addr_family, net::Family::kAny);
  EXPECT_EQ(o.ib_ar_threshold, 16384);
  for (const char* name :
       {"SIEVE_IB_TIMEOUT", "SIEVE_IB_QPS", "SIEVE_IB_HCA", "SIEVE_IB_ADDR_FAMILY", "SIEVE_IB_AR_THRESHOLD"})
    EXPECT_EQ(decided(all, name).origin, Origin::kSieve) << name;
}

TEST(ResolveIbOptions, NcclValuesSieveCannotTakeAreIgnoredOrLowered) {
  const config::Registry registry({});
  net::TransportOptions o;
  const auto all = resolve_ib_options(registry,
                                      environment({{"NCCL_IB_TIMEOUT", "0"},
                                                   {"NCCL_IB_RETRY_CNT", "9"},
                                                   {"NCCL_IB_QPS_PER_CONNECTION", "32"},
                                                   {"NCCL_IB_ADDR_FAMILY", "inet6"}}),
                                      &o);
  EXPECT_EQ(o.ib_timeout, 20);
  EXPECT_EQ(o.ib_retry_count, 7);
  EXPECT_EQ(o.ib_qps, 16);
  EXPECT_EQ(o.ib_addr_family, net::Family::kAny);
  EXPECT_EQ(decided(all, "SIEVE_IB_TIMEOUT").origin, Origin::kDefault);
  EXPECT_EQ(decided(all, "SIEVE_IB_QPS").origin, Origin::kNccl);
  EXPECT_EQ(decided(all, "SIEVE_IB_QPS").value, "16");
  EXPECT_EQ(decided(all, "SIEVE_IB_ADDR_FAMILY").origin, Origin::kDefault);
}

}  // namespace
}  // namespace sieve::plugin
