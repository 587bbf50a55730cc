#include "plugin/stats_export.h"

#include <gtest/gtest.h>
#include <unistd.h>


#include "plugin/peer_traffic.h"
#include "plugin/stats.h"
#include "tests/plugin/read_file.h"

namespace sieve::plugin {
namespace {

using testing::read_file;

TEST(StatsExport, SnapshotCarriesProcessCountersAndEveryConnection) {
  Snapshot before = current_snapshot();
  add(process_stats().bytes_logical_sent, 4096);
  add(process_stats().bytes_wire_sent, 1100);
  add(process_stats().collectives_compacted, 3);
  auto traffic = register_comm_traffic("veth7", "10.77.0.2:5000");
  net::Completion c;
  c.done = true;
  c.sent = true;
  c.size = 4096;
  c.wire_bytes = 1100;
  traffic->posted();
  traffic->completed(c);

  Snapshot after = current_snapshot();
  EXPECT_EQ(after.totals.bytes_logical_sent - before.totals.bytes_logical_sent, 4096u);
  EXPECT_EQ(after.totals.bytes_wire_sent - before.totals.bytes_wire_sent, 1100u);
  EXPECT_EQ(after.collectives_compacted - before.collectives_compacted, 3u);
  EXPECT_EQ(after.pid, static_cast<int>(getpid()));
  bool found = false;
  for (const auto& p : after.peers) {
    if (p.device == "veth7" && p.peer == "10.77.0.2:5000") {
      found = true;
      EXPECT_EQ(p.counters.bytes_wire_sent, 1100u);
      EXPECT_EQ(p.counters.messages_sent, 1u);
    }
  }
  EXPECT_TRUE(found);
}

// One export per process (the writer is process-wide), so this is the only test that starts it.
TEST(StatsExport, WritesTheFileNamedBySieveStatsFileWithPidExpanded) {
  const std::string pattern = ::testing::TempDir() + "sieve-export-%p.prom";
  const std::string path = ::testing::TempDir() + "sieve-export-" + std::to_string(getpid()) + ".prom";
  std::remove(path.c_str());
  config::Registry registry({{"SIEVE_STATS_FILE", pattern}, {"SIEVE_STATS_FORMAT", "prometheus"}});
  ASSERT_TRUE(registry.diagnostics().empty());
  start_stats_export(registry.settings());
  std::string text = read_file(path);
  EXPECT_NE(text.find("# TYPE sieve_wire_sent_bytes_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("pid=\"" + std::to_string(getpid()) + "\""), std::string::npos);
  start_stats_export(registry.settings());  // idempotent: still one writer, no error
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve::plugin
