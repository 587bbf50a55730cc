// SIEVE_DUMP_SIGNAL: a signal makes the process report, on a helper thread, and a handler installed
// before Sieve's still runs. The report goes beside SIEVE_STATS_FILE.
#include "plugin/proxy/hang_dump.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace sieve::plugin::proxy {
namespace {

std::atomic<int> g_previous_calls{0};
void previous_handler(int) { ++g_previous_calls; }

TEST(HangDump, ASignalReportsOnAHelperThreadAndTheJobsOwnHandlerStillRuns) {
  signal(SIGUSR2, previous_handler);
  std::atomic<int> reports{0};
  std::string why;
  ASSERT_TRUE(install_dump_signal(SIGUSR2, [&] { ++reports; }, &why)) << why;
  EXPECT_FALSE(install_dump_signal(SIGUSR2, [] {}, &why)) << "once per process";
  for (int i = 1; i <= 2; ++i) {
    ASSERT_EQ(raise(SIGUSR2), 0);
    for (int wait = 0; wait < 500 && reports.load() < i; ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(reports.load(), i);
    EXPECT_EQ(g_previous_calls.load(), i);
  }
}

TEST(HangDump, TheReportGoesBesideTheStatsFile) {
  EXPECT_EQ(dump_path(""), "") << "nothing is written unless asked for";
  char dir[] = "/tmp/sieve-dump-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string tail = "." + std::to_string(getpid()) + ".txt";
  const std::string beside = dump_path(std::string(dir) + "/stats.%p.json");
  EXPECT_EQ(beside.rfind(std::string(dir) + "/sieve-proxy-state.", 0), 0u) << beside;
  EXPECT_EQ(beside.substr(beside.size() - tail.size()), tail);
  const std::string inside = dump_path(dir);  // a directory, as a textfile collector's
  EXPECT_EQ(inside.rfind(std::string(dir) + "/sieve-proxy-state.", 0), 0u) << inside;
  ASSERT_TRUE(append_report(inside, "first"));
  ASSERT_TRUE(append_report(inside, "second"));
  std::ifstream in(inside);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("first\n"), std::string::npos);
  EXPECT_NE(text.str().find("second\n"), std::string::npos);
  EXPECT_FALSE(append_report("/nonexistent/dir/x.txt", "lost"));
  std::remove(inside.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace sieve::plugin::proxy
