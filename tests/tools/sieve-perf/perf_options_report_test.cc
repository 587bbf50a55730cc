// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/sieve-perf/perf_options.h"
#include "tools/sieve-perf/perf_report.h"

namespace sieve::perf {
namespace {

bool parse(std::vector<const char*> args, Options* options, std::string* error) {
  args.insert(args.begin(), "sieve-perf");
  return parse_options(static_cast<int>(args.size()), const_cast<char**>(args.data()), options, error);
}

TEST(PerfOptions, HelpListsEveryOption) {
  const std::string usage = usage_text();
  for (const std::string& name : option_names()) EXPECT_NE(usage.find(name), std::string::npos) << name;
}

TEST(PerfOptions, EveryBadValueIsRefusedNamingItsOption) {
  const std::vector<std::vector<const char*>> bad = {
      {"--seconds", "0"},       {"--seconds", "x"},      {"--size", "0"},    {"--window", "33"},   {"--abi", "7"},
      {"--abi", "13"},          {"--links", "ethernet"}, {"--zeros", "101"}, {"--word", "3"},      {"--poll-us", "-1"},
      {"--iperf-streams", "0"}, {"--peer", "both"},      {"--json"},         {"--driver", "busy"}, {"--busy", "65"},
      {"--runs", "0"},          {"--compare", ""}};
  for (const auto& args : bad) {
    Options o;
    std::string error;
    EXPECT_FALSE(parse(args, &o, &error)) << args[0];
    EXPECT_NE(error.find(args[0]), std::string::npos) << error;
  }
  Options o;
  std::string error;
  EXPECT_FALSE(parse({"--bogus"}, &o, &error));
  EXPECT_NE(error.find("--bogus"), std::string::npos) << error;
}

TEST(PerfOptions, ParsesTheAbiVersionApartFromTheToolsVersion) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--abi", "9", "--links", "loopback,veth-1g", "--seconds", "2.5"}, &o, &error)) << error;
  EXPECT_EQ(o.abi, 9);
  EXPECT_FALSE(o.version);
  EXPECT_EQ(o.links, (std::vector<std::string>{"loopback", "veth-1g"}));
  EXPECT_DOUBLE_EQ(o.seconds, 2.5);
  ASSERT_TRUE(parse({"--version"}, &o, &error));
  EXPECT_TRUE(o.version);
}

TEST(PerfOptions, DriverBusyRunsAndCompareAreTakenAsGiven) {
  Options o;
  std::string error;
  ASSERT_TRUE(
      parse({"--driver", "spin", "--busy", "2", "--runs", "5", "--compare", "/x/libnccl-net-other.so", "--abi", "12"},
            &o, &error))
      << error;
  EXPECT_EQ(o.driver, "spin");
  EXPECT_EQ(o.busy, 2);
  EXPECT_EQ(o.runs, 5);
  EXPECT_EQ(o.compare, "/x/libnccl-net-other.so");
  EXPECT_EQ(o.abi, 12);
}

// Medians are taken per figure: Gbit/s and CPU per GB of different runs may come from different runs.
TEST(PerfReport, MediansOfRunsAndAFailedRunIsNeverHidden) {
  auto run = [](double gbps, double gb, double cpu) {
    Measure m;
    m.ok = true;
    m.gbps = gbps;
    m.bytes = gb * 1e9;
    m.cpu_seconds = cpu;
    return m;
  };
  const Measure m = median_of({run(9, 1, 3), run(5, 2, 2), run(7, 1, 0.5)});
  ASSERT_TRUE(m.ok);
  EXPECT_DOUBLE_EQ(m.gbps, 7);
  EXPECT_DOUBLE_EQ(m.cpu_per_gb(), 1);  // 3, 1 and 0.5 s/GB
  Measure failed;
  failed.error = "receiver: stalled";
  const Measure with_failure = median_of({run(9, 1, 3), failed});
  EXPECT_FALSE(with_failure.ok);
  EXPECT_EQ(with_failure.error, "receiver: stalled");
}

TEST(PerfReport, JsonByteCountsAreIntegersAndFailedLinksAreKept) {
  Options o;
  o.plugin = "libnccl-net-sieve.so";
  LinkResult loopback;
  loopback.link = "loopback";
  loopback.iperf.ok = loopback.sieve.ok = true;
  loopback.iperf.bytes = 36540000256;
  loopback.sieve.bytes = 39887437824;
  loopback.sieve.gbps = 31.9;
  LinkResult veth;
  veth.link = "veth";
  veth.iperf.error = veth.sieve.error = "needs root to create network namespaces";
  const std::string json = format_json({loopback, veth}, o);
  EXPECT_NE(json.find("\"bytes\":39887437824"), std::string::npos) << json;
  EXPECT_NE(json.find("\"message_bytes\":4194304"), std::string::npos) << json;
  EXPECT_EQ(json.find("e+"), std::string::npos) << json;
  EXPECT_NE(json.find("\"verdict\":\"ERROR\""), std::string::npos) << json;
  bool failed = false;
  const std::string table = format_table({loopback, veth}, o, &failed);
  EXPECT_TRUE(failed);
  EXPECT_NE(table.find("| loopback |"), std::string::npos) << table;
  EXPECT_NE(table.find("veth: not run: needs root"), std::string::npos) << table;
}

// The shaper's held-back packets are reported per GB, as a median of runs, and only where the link
// has a shaper: an unshaped link shows "-" and no JSON member.
TEST(PerfReport, ShaperHoldsArePerGbMediansAndOnlyWhereTheLinkIsShaped) {
  auto run = [](double gb, double holds) {
    Measure m;
    m.ok = true;
    m.gbps = 9;
    m.bytes = gb * 1e9;
    m.cpu_seconds = gb;
    m.shaper_holds = holds;
    return m;
  };
  const Measure m = median_of({run(2, 20000), run(1, 3000), run(4, 2000)});  // 10000, 3000, 500 per GB
  EXPECT_DOUBLE_EQ(m.holds_per_gb(), 3000);
  EXPECT_LT(median_of({run(2, 20000), run(1, -1)}).holds_per_gb(), 0) << "a run without the count makes it unknown";

  Options o;
  o.plugin = "libnccl-net-sieve.so";
  o.compare = "libnccl-net-other.so";
  LinkResult shaped;
  shaped.link = "veth-10g";
  shaped.rate = "10gbit";
  shaped.iperf = run(3, 30000);
  shaped.sieve = m;
  shaped.other = run(2, 1000);
  LinkResult unshaped;
  unshaped.link = "veth";
  unshaped.iperf = unshaped.sieve = unshaped.other = run(5, -1);
  bool failed = false;
  const std::string table = format_table({shaped, unshaped}, o, &failed);
  EXPECT_NE(table.find("| 10000 | 3000 | PASS |"), std::string::npos) << table;  // iperf3, Sieve
  EXPECT_NE(table.find("| 3000 | 500 |\n"), std::string::npos) << table;         // Sieve, the other plugin
  EXPECT_NE(table.find("| - | - | reported |"), std::string::npos) << table;
  EXPECT_NE(table.find("held/GB: packets the link's shaper"), std::string::npos) << table;
  const std::string json = format_json({shaped, unshaped}, o);
  EXPECT_NE(json.find("\"shaper_holds_per_gb\":3000"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"shaper_holds_per_gb\":-"), std::string::npos) << json;
}

}  // namespace
// Which ncclNetPlugin_vN the run drove (--abi 0 means the newest exported) is in the table and JSON.
TEST(PerfReport, TheAbiDrivenIsNamed) {
  Options o;
  o.plugin = "/usr/lib/x86_64-linux-gnu/libnccl-net-sieve.so";
  o.abi_loaded = 12;
  LinkResult loopback;
  loopback.link = "loopback";
  bool failed = false;
  EXPECT_NE(format_table({loopback}, o, &failed).find("libnccl-net-sieve.so (ncclNetPlugin_v12)"), std::string::npos);
  EXPECT_NE(format_json({loopback}, o).find("\"abi\":12"), std::string::npos);
}

}  // namespace sieve::perf
