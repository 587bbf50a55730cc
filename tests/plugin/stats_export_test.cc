// SPDX-License-Identifier: Apache-2.0
#include "plugin/stats_export.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "plugin/net/peer_traffic.h"
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
  add(process_stats().tables_activated, 1);
  add(process_stats().tables_refused, 2);
  add(process_stats().learned_calls_observed, 5);
  add(process_stats().learned_bytes_saved, 640);
  add(process_stats().learned_pattern_changes, 4);
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
  EXPECT_EQ(after.tables_activated - before.tables_activated, 1u);
  EXPECT_EQ(after.tables_refused - before.tables_refused, 2u);
  EXPECT_EQ(after.learned_calls_observed - before.learned_calls_observed, 5u);
  EXPECT_EQ(after.learned_bytes_saved - before.learned_bytes_saved, 640u);
  EXPECT_EQ(after.learned_pattern_changes - before.learned_pattern_changes, 4u);
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

std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string fresh_directory(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name + "-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

// The file holds real totals or does not exist: nothing at start (a rank killed then leaves no file,
// not a file of zeros a scraper reads as a counter reset), the totals so far when asked (a
// communicator's finalize, the last connection's close), the final ones when the export stops.
TEST(StatsExport, TheFileAppearsOnlyWithRealTotals) {
  const std::string dir = fresh_directory("sieve-export");
  const std::string path = dir + "/sieve-export-" + std::to_string(getpid()) + ".prom";
  config::Registry registry({{"SIEVE_STATS_FILE", dir + "/sieve-export-%p.prom"},
                             {"SIEVE_STATS_FORMAT", "prometheus"},
                             {"SIEVE_STATS_JOB", "run-7"}});
  ASSERT_TRUE(registry.diagnostics().empty());
  ASSERT_EQ(start_stats_export(registry.settings()), "");
  EXPECT_EQ(read_file(path), "") << "written before anything moved";
  EXPECT_EQ(start_stats_export(registry.settings()), "");  // idempotent: still one writer, no error

  const uint64_t before = current_snapshot().totals.bytes_logical_sent;
  add(process_stats().bytes_logical_sent, 70000000);
  write_stats_export();
  const std::string total = "sieve_logical_sent_bytes_total{host=";
  std::string text = read_file(path);
  EXPECT_NE(text.find("# TYPE sieve_wire_sent_bytes_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("\"} " + std::to_string(before + 70000000)), std::string::npos) << text;
  EXPECT_NE(text.find(",job=\"run-7\""), std::string::npos) << "SIEVE_STATS_JOB labels the series:\n" << text;

  add(process_stats().bytes_logical_sent, 5);
  stop_stats_export();
  text = read_file(path);
  EXPECT_NE(text.find("} " + std::to_string(before + 70000005) + "\n"), std::string::npos) << "not the final totals:\n"
                                                                                           << text;
  std::remove(path.c_str());
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{".", ".."}));
  rmdir(dir.c_str());
}

// A name without %p is claimed with a lock file beside it while the export runs; stopping removes it.
TEST(StatsExport, StoppingLeavesOnlyTheStatsFile) {
  const std::string dir = fresh_directory("sieve-export-claim");
  config::Registry registry({{"SIEVE_STATS_FILE", dir + "/node.prom"}});
  ASSERT_EQ(start_stats_export(registry.settings()), "");
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{".", "..", "node.prom.lock"}));
  stop_stats_export();
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{".", "..", "node.prom"}));
  std::remove((dir + "/node.prom").c_str());
  rmdir(dir.c_str());
}

// SIEVE_STATS_FILE naming a directory, or a file in a missing one: the reason, and nothing written
// anywhere (not DIR.<pid> and DIR.lock beside the directory, not a hint about %p).
TEST(StatsExport, ADirectoryOrAMissingDirectoryIsRefusedAndNothingIsWritten) {
  const std::string parent = fresh_directory("sieve-export-parent");
  const std::string dir = parent + "/textfile";
  mkdir(dir.c_str(), 0755);
  config::Registry as_directory({{"SIEVE_STATS_FILE", dir}});
  EXPECT_EQ(
      start_stats_export(as_directory.settings()),
      "SIEVE_STATS_FILE=" + dir + ": " + dir + " is a directory: name a file in it, e.g. " + dir + "/sieve-%h-%p.prom");
  write_stats_export();
  stop_stats_export();
  EXPECT_EQ(directory_entries(parent), (std::vector<std::string>{".", "..", "textfile"}));
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{".", ".."}));

  config::Registry missing({{"SIEVE_STATS_FILE", parent + "/nope/s.prom"}});
  const std::string problem = start_stats_export(missing.settings());
  EXPECT_EQ(problem, "SIEVE_STATS_FILE=" + parent + "/nope/s.prom: its directory " + parent +
                         "/nope cannot be used: No such file or directory");
  EXPECT_EQ(problem.find("%p"), std::string::npos) << problem;
  EXPECT_EQ(directory_entries(parent), (std::vector<std::string>{".", "..", "textfile"}));
  rmdir(dir.c_str());
  rmdir(parent.c_str());
}

}  // namespace
}  // namespace sieve::plugin
