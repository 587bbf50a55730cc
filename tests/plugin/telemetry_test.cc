#include "plugin/telemetry.h"
#include "tests/plugin/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace sieve::plugin {
namespace {

Snapshot sample() {
  Snapshot s;
  s.unix_ms = 1700000000000;
  s.pid = 42;
  s.host = "node\"1";
  s.collectives_compacted = 7;
  TrafficCounters a;
  a.bytes_logical_sent = 1000;
  a.bytes_wire_sent = 300;
  a.messages_sent = 2;
  TrafficCounters b;
  b.bytes_logical_sent = 500;
  b.bytes_wire_sent = 100;
  s.peers = {{"eth0", "10.0.0.2:4000", a}, {"eth1", "10.0.1.2:4000", b}, {"eth0", "10.0.0.3:4000", b}};
  for (const auto& p : s.peers) s.totals += p.counters;
  return s;
}

using testing::read_file;

TEST(Telemetry, PerDeviceSumsPeersInFirstSeenOrder) {
  auto devices = per_device(sample());
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].device, "eth0");
  EXPECT_EQ(devices[0].counters.bytes_logical_sent, 1500u);
  EXPECT_EQ(devices[0].counters.bytes_wire_sent, 400u);
  EXPECT_EQ(devices[1].device, "eth1");
  EXPECT_EQ(devices[1].counters.bytes_wire_sent, 100u);
}

TEST(Telemetry, JsonCarriesTotalsDevicesPeersAndEscapes) {
  std::string j = to_json(sample());
  EXPECT_NE(j.find("\"host\": \"node\\\"1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"totals\": {\"bytes_logical_sent\": 2000, \"bytes_wire_sent\": 500"), std::string::npos) << j;
  EXPECT_NE(j.find("\"peer\": \"10.0.1.2:4000\""), std::string::npos);
  EXPECT_NE(j.find("\"collectives_compacted\": 7"), std::string::npos);
}

TEST(Telemetry, PrometheusHasTypedCountersWithLabels) {
  std::string p = to_prometheus(sample());
  EXPECT_NE(p.find("# TYPE sieve_bytes_wire_sent_total counter"), std::string::npos);
  EXPECT_NE(p.find("sieve_bytes_wire_sent_total{host=\"node\\\"1\",pid=\"42\"} 500"), std::string::npos) << p;
  EXPECT_NE(p.find("device=\"eth1\",peer=\"10.0.1.2:4000\"} 100"), std::string::npos) << p;
  EXPECT_NE(p.find("sieve_collectives_compacted_total{host=\"node\\\"1\",pid=\"42\"} 7"), std::string::npos);
}

TEST(Telemetry, PathPatternExpandsPidAndHost) {
  EXPECT_EQ(expand_stats_path("/tmp/s-%h-%p.json", 12, "n1"), "/tmp/s-n1-12.json");
  EXPECT_EQ(expand_stats_path("100%%-%x", 1, "h"), "100%-%x");
}

TEST(Telemetry, WriterWritesAtDestructionAndReportsUnwritablePath) {
  std::string path = ::testing::TempDir() + "sieve-stats-" + std::to_string(getpid()) + ".json";
  std::remove(path.c_str());
  int calls = 0;
  {
    StatsWriter w(path, StatsFormat::Json, 0, [&] {
      ++calls;
      return sample();
    });
  }
  EXPECT_EQ(calls, 1);
  EXPECT_NE(read_file(path).find("\"pid\": 42"), std::string::npos);
  std::remove(path.c_str());

  StatsWriter bad("/nonexistent-dir/x.json", StatsFormat::Json, 0, sample);
  std::string error;
  EXPECT_FALSE(bad.write_now(&error));
  EXPECT_NE(error.find("cannot write stats file /nonexistent-dir/x.json"), std::string::npos);
}

TEST(Telemetry, PeriodicWriterRefreshesTheFile) {
  std::string path = ::testing::TempDir() + "sieve-stats-periodic-" + std::to_string(getpid()) + ".prom";
  std::remove(path.c_str());
  std::atomic<int> calls{0};
  {
    StatsWriter w(path, StatsFormat::Prometheus, 1, [&] {
      ++calls;
      return sample();
    });
    // Bounded wait for the first periodic write (a liveness check, not a timing assertion).
    for (int i = 0; i < 100 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GE(calls.load(), 1);
    EXPECT_NE(read_file(path).find("sieve_messages_sent_total"), std::string::npos);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve::plugin
