// SPDX-License-Identifier: Apache-2.0
// Sieve's lines in NCCL's log: each subsystem goes out as NCCL's flags, warnings as NCCL's own WARN
// (every flag, so NCCL_DEBUG_SUBSYS cannot hide them), and a line NCCL will not print is neither
// formatted nor are its arguments evaluated.
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdlib>
#include <string>
#include <vector>

#include "net/log.h"
#include "plugin/net/net_plugin.h"

namespace sieve::plugin {
namespace {

struct Line {
  abi::ncclDebugLogLevel level;
  unsigned long flags;
  std::string text;
};
std::vector<Line> g_lines;

void fake_nccl_logger(abi::ncclDebugLogLevel level, unsigned long flags, const char*, int, const char* fmt, ...) {
  char text[1200];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  g_lines.push_back({level, flags, text});
}

// Installs the fake logger under the given NCCL_DEBUG / NCCL_DEBUG_SUBSYS (nullptr: unset).
class NcclLog {
 public:
  NcclLog(const char* debug, const char* subsys) {
    set("NCCL_DEBUG", debug);
    set("NCCL_DEBUG_SUBSYS", subsys);
    g_lines.clear();
    install_nccl_logger(fake_nccl_logger);
  }
  ~NcclLog() {
    install_nccl_logger(nullptr);
    unsetenv("NCCL_DEBUG");
    unsetenv("NCCL_DEBUG_SUBSYS");
  }

 private:
  static void set(const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
};

int g_evaluated = 0;
const char* counted(const char* text) {
  ++g_evaluated;
  return text;
}

TEST(NcclLogger, SubsystemsGoOutAsNcclFlagsAndWarningsAsEveryFlag) {
  NcclLog log("TRACE", "ALL");
  SIEVE_LOG(Info, Init, "set up");
  SIEVE_LOG(Info, Net, "connected");
  SIEVE_LOG(Info, Coll, "commit");
  SIEVE_LOG(Trace, Env, "read");
  SIEVE_LOG(Warn, Net, "broken");
  ASSERT_EQ(g_lines.size(), 5u);
  EXPECT_EQ(g_lines[0].flags, abi::NCCL_INIT | abi::NCCL_NET);
  EXPECT_EQ(g_lines[1].flags, abi::NCCL_NET);
  EXPECT_EQ(g_lines[2].flags, abi::NCCL_COLL);
  EXPECT_EQ(g_lines[3].flags, abi::NCCL_ENV);
  EXPECT_EQ(g_lines[3].level, abi::NCCL_LOG_TRACE);
  EXPECT_EQ(g_lines[4].flags, abi::NCCL_ALL);
  EXPECT_EQ(g_lines[4].text, "NET/Sieve broken");
}

// A file's own macros log under its default subsystem (Net for this test's target).
TEST(NcclLogger, PlainMacrosUseTheFilesSubsystem) {
  NcclLog log("INFO", "NET");
  SIEVE_INFO("via the default %d", 1);
  ASSERT_EQ(g_lines.size(), 1u);
  EXPECT_EQ(g_lines[0].flags, abi::NCCL_NET);
}

TEST(NcclLogger, LinesNcclWillNotPrintAreNeverFormatted) {
  {
    NcclLog log("WARN", nullptr);
    g_evaluated = 0;
    SIEVE_LOG(Info, Init, "%s", counted("not printed"));
    SIEVE_LOG(Trace, Net, "%s", counted("not printed"));
    EXPECT_EQ(g_evaluated, 0);
    EXPECT_TRUE(g_lines.empty());
    SIEVE_LOG(Warn, Coll, "%s", counted("printed"));  // whatever the level and subsystems
    EXPECT_EQ(g_evaluated, 1);
    EXPECT_EQ(g_lines.size(), 1u);
  }
  {
    NcclLog log("INFO", nullptr);  // NCCL's default subsystems: INIT, BOOTSTRAP, ENV
    g_evaluated = 0;
    SIEVE_LOG(Info, Init, "%s", counted("printed"));
    SIEVE_LOG(Info, Env, "%s", counted("printed"));
    SIEVE_LOG(Info, Net, "%s", counted("not printed"));
    SIEVE_LOG(Info, Coll, "%s", counted("not printed"));
    SIEVE_LOG(Trace, Init, "%s", counted("not printed"));
    EXPECT_EQ(g_evaluated, 2);
    EXPECT_EQ(g_lines.size(), 2u);
  }
  {
    NcclLog log("INFO", "^NET");
    g_evaluated = 0;
    SIEVE_LOG(Info, Net, "%s", counted("not printed"));
    SIEVE_LOG(Info, Coll, "%s", counted("printed"));
    EXPECT_EQ(g_evaluated, 1);
  }
}

// What NCCL decides that Sieve cannot read is left to NCCL: NCCL_DEBUG unset (a stand-in for NCCL
// may print at a level of its own), a level or a subsystem name Sieve does not know.
TEST(NcclLogger, UnreadableSettingsPassEverythingToNccl) {
  struct Case {
    const char* debug;
    const char* subsys;
    size_t lines;  // of the two below: an INFO line about COLL, a TRACE line about NET
  };
  for (const Case& c : {Case{nullptr, "INIT", 2}, Case{"INFO", "INIT,SOMETHING_NEW", 1}, Case{"verbose", "NET", 1}}) {
    NcclLog log(c.debug, c.subsys);
    SIEVE_LOG(Info, Coll, "passed");
    SIEVE_LOG(Trace, Net, "passed");
    EXPECT_EQ(g_lines.size(), c.lines) << (c.debug ? c.debug : "unset") << " " << c.subsys;
  }
  EXPECT_EQ(sieve_subsystems("init,Net"),
            static_cast<uint32_t>(log::Subsystem::kInit) | static_cast<uint32_t>(log::Subsystem::kNet));
  EXPECT_EQ(sieve_level("version"), log::Level::kWarn);
}

// Without NCCL's logger, stderr's threshold (SIEVE_LOG_LEVEL) decides, before formatting too.
TEST(NcclLogger, StderrThresholdIsCheckedBeforeFormatting) {
  log::set_stderr_level(log::Level::kWarn);
  g_evaluated = 0;
  SIEVE_INFO("%s", counted("not printed"));
  EXPECT_EQ(g_evaluated, 0);
  log::set_stderr_level(log::Level::kNone);
  SIEVE_WARN("%s", counted("not printed"));
  EXPECT_EQ(g_evaluated, 0);
  log::set_stderr_level(log::Level::kWarn);
}

}  // namespace
}  // namespace sieve::plugin
