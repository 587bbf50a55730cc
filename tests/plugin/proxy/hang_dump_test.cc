// SIEVE_DUMP_SIGNAL: a signal makes the process report, on a helper thread, and a handler installed
// before Sieve's still runs. The report goes beside SIEVE_STATS_FILE.
#include "plugin/proxy/hang_dump.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
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

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The dump's name is predictable and its directory may be shared: another user's symlink planted
// at it must not be written through, nor a file that is not this user's; a new dump is 0600.
TEST(HangDump, TheReportIsNeverWrittenThroughAPlantedLinkOrIntoAnotherUsersFile) {
  char dir[] = "/tmp/sieve-dump-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = dump_path(dir);
  const std::string victim = std::string(dir) + "/victim";
  { std::ofstream(victim) << "precious\n"; }
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  std::string why;
  EXPECT_FALSE(append_report(path, "planted", &why));
  EXPECT_NE(why.find("symbolic link"), std::string::npos) << why;
  EXPECT_EQ(contents(victim), "precious\n");
  std::remove(path.c_str());

  const std::string dangling = std::string(dir) + "/created-through-link";
  ASSERT_EQ(symlink(dangling.c_str(), path.c_str()), 0);
  EXPECT_FALSE(append_report(path, "planted", &why));
  struct stat st {};
  EXPECT_NE(stat(dangling.c_str(), &st), 0) << "a file was created through a dangling link";
  std::remove(path.c_str());

  ASSERT_EQ(link(victim.c_str(), path.c_str()), 0);  // a hard link: the same file under the name
  EXPECT_FALSE(append_report(path, "linked", &why));
  EXPECT_EQ(contents(victim), "precious\n");
  std::remove(path.c_str());

  ASSERT_TRUE(append_report(path, "mine", &why)) << why;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  if (geteuid() == 0) {  // only root can hand a file to another user
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
    EXPECT_FALSE(append_report(path, "theirs", &why));
    EXPECT_NE(why.find("belongs to user 65534"), std::string::npos) << why;
  }
  std::remove(path.c_str());
  std::remove(victim.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace sieve::plugin::proxy
