// SPDX-License-Identifier: Apache-2.0
#include "plugin/telemetry.h"
#include "tests/plugin/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <atomic>
#include <chrono>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

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
  EXPECT_NE(p.find("# TYPE sieve_wire_sent_bytes_total counter"), std::string::npos) << p;
  EXPECT_NE(p.find("sieve_wire_sent_bytes_total{host=\"node\\\"1\"} 500"), std::string::npos) << p;
  EXPECT_NE(p.find("sieve_peer_wire_sent_bytes_total{host=\"node\\\"1\",device=\"eth1\",peer_host=\"10.0.1.2\"} 100"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("sieve_collectives_compacted_total{host=\"node\\\"1\"} 7"), std::string::npos) << p;
}

// Series stay bounded at 64 nodes x 8 ranks and across restarts: no pid, no ephemeral port; the
// connections to one host (each from its own port) are one series, their sum; the rank where known.
TEST(Telemetry, PrometheusLabelsPeersByHostAndProcessesByRank) {
  Snapshot s = sample();
  TrafficCounters c;
  c.bytes_wire_sent = 11;
  s.peers.push_back({"eth1", "10.0.1.2:4001", c});  // a second connection to 10.0.1.2
  s.peers.push_back({"eth1", "[fe80::2]:4002", c});
  s.rank = "17";
  const std::string p = to_prometheus(s);
  EXPECT_EQ(p.find("pid="), std::string::npos) << p;
  EXPECT_EQ(p.find(":4000"), std::string::npos) << p;
  EXPECT_NE(p.find("sieve_peer_wire_sent_bytes_total{host=\"node\\\"1\",rank=\"17\",device=\"eth1\",peer_host=\"10.0.1."
                   "2\"} 111\n"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("peer_host=\"fe80::2\"} 11\n"), std::string::npos) << p;
  EXPECT_NE(p.find("sieve_wire_sent_bytes_total{host=\"node\\\"1\",rank=\"17\"} "), std::string::npos) << p;
  size_t series = 0;
  for (size_t at = p.find("sieve_peer_wire_sent_bytes_total{"); at != std::string::npos;
       at = p.find("sieve_peer_wire_sent_bytes_total{", at + 1))
    ++series;
  EXPECT_EQ(series, 4u) << "eth0 x 2 hosts, eth1 x 2 hosts\n" << p;
  // The JSON keeps every connection, port and pid included.
  const std::string j = to_json(s);
  EXPECT_NE(j.find("\"peer\": \"10.0.1.2:4001\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"pid\": 42"), std::string::npos) << j;
}

TEST(Telemetry, PeerHostDropsOnlyAPort) {
  EXPECT_EQ(peer_host("10.0.0.2:4000"), "10.0.0.2");
  EXPECT_EQ(peer_host("[::1]:59374"), "::1");
  EXPECT_EQ(peer_host("fe80::1"), "fe80::1");  // no brackets: no port to drop
  EXPECT_EQ(peer_host("node7"), "node7");
  EXPECT_EQ(peer_host("node7:x"), "node7:x");
}

TEST(Telemetry, LauncherRankInOrderDigitsOnly) {
  static std::map<std::string, std::string> env;
  auto lookup = [](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env = {};
  EXPECT_EQ(launcher_rank(lookup), "");
  env = {{"SLURM_PROCID", "5"}, {"OMPI_COMM_WORLD_RANK", "6"}};
  EXPECT_EQ(launcher_rank(lookup), "5");
  env = {{"RANK", "x1"}, {"PMI_RANK", "3"}};
  EXPECT_EQ(launcher_rank(lookup), "3") << "a value that is no rank is skipped";
}

// Two jobs on one node, or a restarted job beside its predecessor's file, are different series.
TEST(Telemetry, LauncherJobLabelsTheProcessSeries) {
  static std::map<std::string, std::string> env;
  auto lookup = [](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env = {};
  EXPECT_EQ(launcher_job(lookup), "");
  env = {{"TORCHELASTIC_RUN_ID", "none"}, {"SLURM_JOB_ID", "4242"}};
  EXPECT_EQ(launcher_job(lookup), "4242") << "torchrun's default run id names no job";
  env = {{"TORCHELASTIC_RUN_ID", "run-7"}, {"SLURM_JOB_ID", "4242"}};
  EXPECT_EQ(launcher_job(lookup), "run-7");
  Snapshot s = sample();
  s.rank = "3";
  s.job = "run-7";
  const std::string p = to_prometheus(s);
  EXPECT_NE(p.find("sieve_wire_sent_bytes_total{host=\"node\\\"1\",job=\"run-7\",rank=\"3\"} "), std::string::npos)
      << p;
  EXPECT_NE(p.find("sieve_peer_wire_sent_bytes_total{host=\"node\\\"1\",job=\"run-7\",rank=\"3\",device="),
            std::string::npos)
      << p;
}

// Every process counter reaches both formats, each with its own value (a counter wired to the wrong
// field, or left out of one format, shows as a missing or wrong number).
TEST(Telemetry, EveryProcessCounterIsInJsonAndPrometheus) {
  Snapshot s = sample();
  for (size_t i = 0; i < kProcessCounterCount; ++i) s.*kProcessCounters[i].member = 1000 + i;
  const std::string j = to_json(s), p = to_prometheus(s);
  for (size_t i = 0; i < kProcessCounterCount; ++i) {
    const ProcessCounter& c = kProcessCounters[i];
    const std::string value = std::to_string(1000 + i);
    EXPECT_NE(j.find(std::string("\"") + c.json + "\": " + value + ","), std::string::npos) << c.json << "\n" << j;
    EXPECT_NE(p.find(std::string("# TYPE sieve_") + c.metric + "_total counter"), std::string::npos) << c.metric;
    EXPECT_NE(p.find(std::string("sieve_") + c.metric + "_total{host=\"node\\\"1\"} " + value + "\n"),
              std::string::npos)
        << c.metric << "\n"
        << p;
  }
  EXPECT_NE(p.find("sieve_learned_saved_bytes_total{"), std::string::npos) << "bytes carry the unit before _total";
}

// Prometheus exposition, parsed the way a scraper does: metric family -> its samples.
struct Family {
  std::string type;
  int help_lines = 0, type_lines = 0;
  double sum = 0;
  std::vector<std::string> samples;
};

std::map<std::string, Family> parse_prometheus(const std::string& text) {
  std::map<std::string, Family> families;
  std::istringstream in(text);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      Family& f = families[name];
      if (line[2] == 'H') ++f.help_lines;
      else {
        ++f.type_lines;
        f.type = type;
      }
      current = name;
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(name, current) << "a sample outside its family's block: " << line;
    Family& f = families[name];
    f.sum += std::stod(line.substr(line.rfind(' ') + 1));
    f.samples.push_back(line);
  }
  return families;
}

// sum(metric) must count each byte once: process totals and per-peer series are different metrics.
TEST(Telemetry, PrometheusSumOfEachMetricCountsEveryByteOnce) {
  const Snapshot s = sample();
  const auto families = parse_prometheus(to_prometheus(s));
  ASSERT_TRUE(families.count("sieve_wire_sent_bytes_total"));
  EXPECT_EQ(families.at("sieve_wire_sent_bytes_total").sum, double(s.totals.bytes_wire_sent));
  EXPECT_EQ(families.at("sieve_logical_sent_bytes_total").sum, double(s.totals.bytes_logical_sent));
  EXPECT_EQ(families.at("sieve_messages_sent_total").sum, double(s.totals.messages_sent));
  ASSERT_TRUE(families.count("sieve_peer_wire_sent_bytes_total"));
  EXPECT_EQ(families.at("sieve_peer_wire_sent_bytes_total").samples.size(), s.peers.size());
  EXPECT_EQ(families.at("sieve_peer_wire_sent_bytes_total").sum, double(s.totals.bytes_wire_sent));
}

// Naming conventions: one HELP and one TYPE per family; counters end in _total, with the unit
// before it in base units (bytes, seconds).
TEST(Telemetry, PrometheusNamesFollowTheConventions) {
  Snapshot s = sample();
  s.peers[0].counters.busy_ns = 1500000000;
  s.totals.busy_ns = 1500000000;
  const auto families = parse_prometheus(to_prometheus(s));
  EXPECT_GE(families.size(), 10u);
  for (const auto& [name, f] : families) {
    EXPECT_EQ(f.help_lines, 1) << name;
    EXPECT_EQ(f.type_lines, 1) << name;
    EXPECT_EQ(f.type, "counter") << name;
    EXPECT_EQ(name.rfind("sieve_", 0), 0u) << name;
    EXPECT_TRUE(name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0) << name;
    if (name.find("bytes") != std::string::npos) { EXPECT_NE(name.find("_bytes_total"), std::string::npos) << name; }
    EXPECT_EQ(name.find("_ns"), std::string::npos) << name << ": not in base units";
  }
  ASSERT_TRUE(families.count("sieve_busy_seconds_total"));
  EXPECT_DOUBLE_EQ(families.at("sieve_busy_seconds_total").sum, 1.5);
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
    StatsWriter w(path, config::StatsFileFormat::kJson, 0, [&] {
      ++calls;
      return sample();
    });
  }
  EXPECT_EQ(calls, 1);
  EXPECT_NE(read_file(path).find("\"pid\": 42"), std::string::npos);
  std::remove(path.c_str());

  StatsWriter bad("/nonexistent-dir/x.json", config::StatsFileFormat::kJson, 0, sample);
  std::string error;
  EXPECT_FALSE(bad.write_now(&error));
  EXPECT_NE(error.find("cannot write stats file /nonexistent-dir/x.json"), std::string::npos);
}

TEST(Telemetry, PeriodicWriterRefreshesTheFile) {
  std::string path = ::testing::TempDir() + "sieve-stats-periodic-" + std::to_string(getpid()) + ".prom";
  std::remove(path.c_str());
  std::atomic<int> calls{0};
  {
    StatsWriter w(path, config::StatsFileFormat::kPrometheus, 1, [&] {
      ++calls;
      return sample();
    });
    // Bounded wait for the first periodic write (a liveness check, not a timing assertion). The
    // file, not the sampling call, is what to wait for: the write and rename come after the sample.
    std::string text;
    for (int i = 0; i < 100 && text.find("sieve_messages_sent_total") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      text = read_file(path);
    }
    EXPECT_GE(calls.load(), 1);
    EXPECT_NE(text.find("sieve_messages_sent_total"), std::string::npos) << "no periodic write within 5 s";
  }
  std::remove(path.c_str());
}

// Writers of one path (processes of a job sharing SIEVE_STATS_FILE, or a periodic write racing the
// final one) each write their own temporary file: a reader sees one writer's whole file, never a mix,
// and no writer's rename fails because another took its temporary file.
TEST(Telemetry, WritersSharingAPathNeverExposeAPartialFile) {
  const std::string path = ::testing::TempDir() + "sieve-stats-shared-" + std::to_string(getpid()) + ".json";
  std::remove(path.c_str());
  Snapshot a = sample();
  Snapshot b = sample();
  b.pid = 43;
  for (int i = 0; i < 2000; ++i) b.peers.push_back({"eth0", "10.0.2." + std::to_string(i % 250) + ":4000", {}});
  const std::string text_a = to_json(a), text_b = to_json(b);
  std::atomic<int> failed_writes{0}, torn_reads{0};
  std::atomic<bool> stop{false};
  {
    StatsWriter wa(path, config::StatsFileFormat::kJson, 0, [&] { return a; });
    StatsWriter wb(path, config::StatsFileFormat::kJson, 0, [&] { return b; });
    std::thread reader([&] {
      while (!stop.load()) {
        const std::string text = read_file(path);
        if (!text.empty() && text != text_a && text != text_b) ++torn_reads;
      }
    });
    auto hammer = [&](StatsWriter& w) {
      for (int i = 0; i < 200; ++i)
        if (!w.write_now()) ++failed_writes;
    };
    std::thread ta(hammer, std::ref(wa)), tb(hammer, std::ref(wb));
    ta.join();
    tb.join();
    stop = true;
    reader.join();
  }
  EXPECT_EQ(failed_writes.load(), 0);
  EXPECT_EQ(torn_reads.load(), 0);
  std::remove(path.c_str());
}

// A SIEVE_STATS_FILE without %p names one file for all the processes that share it: the first live
// one writes it; another gets its own file (pid before the extension) and a note saying so; when the
// first one is gone (its claim released, as the kernel does at exit), the name is free again.
TEST(Telemetry, ASharedStatsPathIsWrittenByOneLiveProcess) {
  const std::string dir = ::testing::TempDir();
  const std::string tag = std::to_string(getpid());
  const std::string pattern = dir + "sieve-claim-" + tag + ".prom";
  std::unique_ptr<StatsFileClaim> first, second, third;
  std::string note;
  EXPECT_EQ(choose_stats_path(pattern, 100, "h", &first, &note), pattern);
  EXPECT_TRUE(first);
  EXPECT_EQ(note, "");
  EXPECT_EQ(choose_stats_path(pattern, 200, "h", &second, &note), dir + "sieve-claim-" + tag + ".200.prom");
  EXPECT_NE(note.find("SIEVE_STATS_FILE=" + pattern), std::string::npos) << note;
  EXPECT_NE(note.find("%p"), std::string::npos) << note;
  first.reset();
  note.clear();
  EXPECT_EQ(choose_stats_path(pattern, 300, "h", &third, &note), pattern);
  EXPECT_EQ(note, "");
  std::unique_ptr<StatsFileClaim> unclaimed;
  EXPECT_EQ(choose_stats_path(dir + "s-%h-%p.prom", 7, "n1", &unclaimed, &note), dir + "s-n1-7.prom");
  EXPECT_EQ(note, "");
  third.reset();
  second.reset();
  EXPECT_NE(access((pattern + ".lock").c_str(), F_OK), 0) << "the released claim left its lock file";
}

// One after another, too: a process that finds the name unclaimed but holding a finished
// process's final totals writes its own file instead of overwriting them; the process that wrote
// the file goes on writing it after a stop and a new start.
TEST(Telemetry, ASharedStatsPathNeverOverwritesAnEarlierProcesssTotals) {
  const std::string dir = ::testing::TempDir();
  const std::string tag = std::to_string(getpid());
  const std::string pattern = dir + "sieve-turns-" + tag + ".json";
  std::remove(pattern.c_str());
  std::unique_ptr<StatsFileClaim> first, second, again;
  std::string note;
  ASSERT_EQ(choose_stats_path(pattern, 100, "h", &first, &note), pattern);
  {
    StatsWriter writer(pattern, config::StatsFileFormat::kJson, 0, [] {
      Snapshot s;
      s.pid = 100;
      return s;
    });
  }
  first.reset();  // the first process ends: its final totals are in the file, its claim is gone
  EXPECT_EQ(choose_stats_path(pattern, 200, "h", &second, &note), dir + "sieve-turns-" + tag + ".200.json");
  EXPECT_FALSE(second) << "holds a claim on a name it does not write";
  EXPECT_NE(note.find("final totals of an earlier process"), std::string::npos) << note;
  EXPECT_NE(read_file(pattern).find("\"pid\": 100"), std::string::npos) << "the first process's totals are gone";
  note.clear();
  EXPECT_EQ(choose_stats_path(pattern, 100, "h", &again, &note, pattern), pattern);
  EXPECT_TRUE(again);
  EXPECT_EQ(note, "");
  again.reset();
  std::remove(pattern.c_str());
}

// Releasing a claim removes its lock file: ordinary runs leave only the files asked for. A file
// left by a killed holder is taken over by the next claimant and removed when it lets go.
TEST(Telemetry, AReleasedClaimLeavesNoLockFile) {
  const std::string path = ::testing::TempDir() + "sieve-lock-" + std::to_string(getpid()) + ".prom";
  const std::string lock = path + ".lock";
  std::string error;
  {
    FILE* stale = std::fopen(lock.c_str(), "w");
    ASSERT_TRUE(stale);
    std::fclose(stale);
  }  // a killed holder's
  auto claim = StatsFileClaim::take(path, &error);
  ASSERT_TRUE(claim) << error;
  EXPECT_EQ(access(lock.c_str(), F_OK), 0);
  EXPECT_FALSE(StatsFileClaim::take(path, &error)) << "a second holder got the claim";
  claim.reset();
  EXPECT_NE(access(lock.c_str(), F_OK), 0) << lock << " is still there";
  claim = StatsFileClaim::take(path, &error);
  EXPECT_TRUE(claim) << "the name is not free again: " << error;
  claim.reset();
  EXPECT_NE(access(lock.c_str(), F_OK), 0);
}

// A metrics directory may be shared and group-writable: a dangling symlink planted at the .lock
// name must not create a file wherever it points (an empty root-owned /etc/nologin, say), a lock
// file of another user's is not taken, and the claim then falls back to a file of this process's.
TEST(Telemetry, TheLockIsNeverCreatedThroughAPlantedLink) {
  char dir[] = "/tmp/sieve-stats-dir-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/node.prom";
  const std::string target = std::string(dir) + "/nologin";
  ASSERT_EQ(symlink(target.c_str(), (path + ".lock").c_str()), 0);
  std::string error;
  EXPECT_FALSE(StatsFileClaim::take(path, &error));
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "a file was created through the planted link";
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
  std::unique_ptr<StatsFileClaim> claim;
  std::string note;
  EXPECT_EQ(choose_stats_path(path, 9, "h", &claim, &note), std::string(dir) + "/node.9.prom");
  std::remove((path + ".lock").c_str());
  if (geteuid() == 0) {  // only root can hand a file to another user
    {
      FILE* theirs = std::fopen((path + ".lock").c_str(), "w");
      ASSERT_TRUE(theirs);
      std::fclose(theirs);
    }
    ASSERT_EQ(chown((path + ".lock").c_str(), 65534, 65534), 0);
    EXPECT_FALSE(StatsFileClaim::take(path, &error));
    EXPECT_NE(error.find("belongs to user 65534"), std::string::npos) << error;
    std::remove((path + ".lock").c_str());
  }
  rmdir(dir);
}

// The stats file is this user's alone unless SIEVE_STATS_MODE asks for more (a scraper running as
// another user).
TEST(Telemetry, TheStatsFileIsPrivateUnlessAskedOtherwise) {
  const std::string path = ::testing::TempDir() + "sieve-stats-mode-" + std::to_string(getpid()) + ".json";
  struct stat st {};
  { StatsWriter w(path, config::StatsFileFormat::kJson, 0, sample); }
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  { StatsWriter w(path, config::StatsFileFormat::kJson, 0, sample, 0644); }
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  std::remove(path.c_str());
}

// A SIEVE_STATS_FILE that cannot be a file is named as such before anything is created: a directory
// (operators give the textfile collector's), or a file in a directory that does not exist.
TEST(Telemetry, AStatsPathThatCannotBeAFileIsExplained) {
  const std::string dir = ::testing::TempDir() + "sieve-dir-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  EXPECT_EQ(stats_path_problem(dir), dir + " is a directory: name a file in it, e.g. " + dir + "/sieve-%h-%p.prom");
  EXPECT_EQ(stats_path_problem(dir + "/"),
            dir + "/ is a directory: name a file in it, e.g. " + dir + "/sieve-%h-%p.prom");
  EXPECT_EQ(stats_path_problem(dir + "/missing/s.prom"),
            "its directory " + dir + "/missing cannot be used: No such file or directory");
  EXPECT_EQ(stats_path_problem(dir + "/s.prom"), "");
  EXPECT_EQ(stats_path_problem("relative.prom"), "");
  rmdir(dir.c_str());
}

// O_NOFOLLOW guards only a path's last component. With a symbolic link for the
// directory, the stats file and its lock were written into another user's private directory.
TEST(Telemetry, NothingIsWrittenUnderASymlinkedDirectory) {
  char victim[] = "/tmp/sieve-victim-XXXXXX";
  char attacker[] = "/tmp/sieve-attacker-XXXXXX";
  ASSERT_NE(mkdtemp(victim), nullptr);
  ASSERT_NE(mkdtemp(attacker), nullptr);
  const std::string link = std::string(attacker) + "/metrics";
  ASSERT_EQ(symlink(victim, link.c_str()), 0);
  const std::string path = link + "/stats.json";
  EXPECT_NE(stats_path_problem(path).find("symbolic link"), std::string::npos) << stats_path_problem(path);
  std::string error;
  {
    StatsWriter w(path, config::StatsFileFormat::kJson, 0, sample);
    EXPECT_FALSE(w.write_now(&error));
    EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
  }
  EXPECT_FALSE(StatsFileClaim::take(path, &error));
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
  std::string written;
  EXPECT_FALSE(stats_directory_writable(path, &written));
  struct stat st {};
  EXPECT_NE(stat((std::string(victim) + "/stats.json").c_str(), &st), 0) << "written through the link";
  EXPECT_NE(stat((std::string(victim) + "/stats.json.lock").c_str(), &st), 0) << "locked through the link";

  // During a run: the writer's directory is swapped for a link to the victim's; the periodic
  // rewrite must not follow it there and replace the victim's own stats.json.
  const std::string real = std::string(attacker) + "/real";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  {
    StatsWriter w(real + "/stats.json", config::StatsFileFormat::kJson, 0, sample);
    ASSERT_TRUE(w.write_now(&error)) << error;
    const std::string moved = std::string(attacker) + "/moved";
    ASSERT_EQ(rename(real.c_str(), moved.c_str()), 0);
    ASSERT_EQ(symlink(victim, real.c_str()), 0);
    EXPECT_TRUE(w.write_now(&error)) << error;  // into the directory it opened, wherever that went
    EXPECT_NE(stat((std::string(victim) + "/stats.json").c_str(), &st), 0) << "the rewrite followed the link";
    std::remove((moved + "/stats.json").c_str());
    rmdir(moved.c_str());
  }
  std::remove(real.c_str());
  std::remove(link.c_str());
  std::remove((std::string(victim) + "/stats.json").c_str());
  rmdir(victim);
  rmdir(attacker);
}

// A directory others can write to lets them rename files in it: refused unless it is sticky (as
// /tmp) and owned by this user or root.
TEST(Telemetry, ADirectoryOthersCanWriteIsRefusedUnlessSticky) {
  char dir[] = "/tmp/sieve-shared-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/stats.json";
  ASSERT_EQ(chmod(dir, 0777), 0);
  EXPECT_NE(stats_path_problem(path).find("not sticky"), std::string::npos) << stats_path_problem(path);
  std::string error;
  {
    StatsWriter w(path, config::StatsFileFormat::kJson, 0, sample);
    EXPECT_FALSE(w.write_now(&error));
    EXPECT_NE(error.find("not sticky"), std::string::npos) << error;
  }
  ASSERT_EQ(chmod(dir, 0775), 0);  // writable by the group only: the same
  EXPECT_NE(stats_path_problem(path).find("not sticky"), std::string::npos);
  ASSERT_EQ(chmod(dir, 01777), 0);
  EXPECT_EQ(stats_path_problem(path), "");
  if (geteuid() == 0) {  // only root can hand a directory to another user
    ASSERT_EQ(chown(dir, 65534, 65534), 0);
    EXPECT_NE(stats_path_problem(path).find("belongs to user 65534"), std::string::npos) << stats_path_problem(path);
    ASSERT_EQ(chown(dir, 0, 0), 0);
  }
  rmdir(dir);
}

// Another user can take a predictable name first in a shared (sticky) directory; the process then
// writes a name of its own beside it, and says so, rather than nothing at all.
TEST(Telemetry, ASquattedStatsNameFallsBackToAUniqueOne) {
  char dir[] = "/tmp/sieve-squat-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(chmod(dir, 01777), 0);
  const std::string pattern = std::string(dir) + "/node-%p.prom";
  const std::string predictable = std::string(dir) + "/node-9.prom";
  ASSERT_EQ(mkfifo(predictable.c_str(), 0666), 0);  // anything but this user's own file
  std::unique_ptr<StatsFileClaim> claim;
  std::string note;
  const std::string chosen = choose_stats_path(pattern, 9, "h", &claim, &note);
  EXPECT_NE(chosen, predictable);
  EXPECT_EQ(chosen.rfind(std::string(dir) + "/node-9.", 0), 0u) << chosen;
  EXPECT_NE(note.find("instead"), std::string::npos) << note;
  {
    StatsWriter w(chosen, config::StatsFileFormat::kJson, 0, sample);
    std::string error;
    EXPECT_TRUE(w.write_now(&error)) << error;
  }
  std::remove(chosen.c_str());
  std::remove(predictable.c_str());

  // Without %p: the lock and the name with the pid, both taken.
  const std::string shared = std::string(dir) + "/node.prom";
  ASSERT_EQ(mkfifo((shared + ".lock").c_str(), 0666), 0);
  ASSERT_EQ(mkfifo((std::string(dir) + "/node.9.prom").c_str(), 0666), 0);
  note.clear();
  const std::string second = choose_stats_path(shared, 9, "h", &claim, &note);
  EXPECT_NE(second, shared);
  EXPECT_NE(second, std::string(dir) + "/node.9.prom");
  EXPECT_NE(note.find("instead"), std::string::npos) << note;
  std::remove((shared + ".lock").c_str());
  std::remove((std::string(dir) + "/node.9.prom").c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace sieve::plugin
