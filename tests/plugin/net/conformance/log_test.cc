// SPDX-License-Identifier: Apache-2.0
// What the plugin's log looks like to a user: a configuration problem is warned once per process,
// however often NCCL initialises and finalises the plugin (NCCL 2.28 does so per communicator),
// and outside NCCL every line on stderr has the one format "LEVEL NET/Sieve message", without
// NCCL's decorations or a source path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/nccl_emulator/plugin_loader.h"

namespace sieve::conformance {
namespace {

// The plugin reads its environment once, at its first use in the process: set it before any test.
const bool kEnvironment = [] {
  setenv("SIEVE_SOCKET_IFNAME", "lo", 1);
  setenv("SIEVE_NSOCK", "2", 1);  // misspelt SIEVE_NSOCKS: one warning, once
  return true;
}();

std::unique_ptr<tools::NetPlugin> open_version(int version, int log_level) {
  tools::LoaderOptions options;
  options.version = version;
  options.log_level = log_level;
  std::string error;
  auto net = tools::NetPlugin::open(SIEVE_PLUGIN_PATH, options, &error);
  EXPECT_TRUE(net) << error;
  return net;
}

// Captures what this process writes to stderr while alive.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    dup2(fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string all;
    std::rewind(file_);
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0) all.append(buffer, n);
    return all;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_ = -1;
};

TEST(PluginLog, ConfigurationProblemIsWarnedOncePerProcess) {
  ASSERT_TRUE(kEnvironment);
  auto net = open_version(11, 0);
  ASSERT_TRUE(net);
  for (int round = 0; round < 3; ++round) {  // one communicator after another
    ASSERT_EQ(net->init(), tools::kNetSuccess);
    ASSERT_EQ(net->finalize(), tools::kNetSuccess);
  }
  auto legacy = open_version(8, 0);  // another ABI version in the same process
  ASSERT_TRUE(legacy);
  ASSERT_EQ(legacy->init(), tools::kNetSuccess);
  EXPECT_EQ(tools::plugin_warning_count(), 1u) << "last: " << tools::last_plugin_warning();
  EXPECT_NE(tools::last_plugin_warning().find("SIEVE_NSOCK (did you mean SIEVE_NSOCKS?)"), std::string::npos)
      << tools::last_plugin_warning();
}

TEST(PluginLog, StderrLinesOutsideNcclHaveOneFormat) {
  ASSERT_TRUE(kEnvironment);
  StderrCapture capture;
  {
    auto net = open_version(11, 2);
    ASSERT_TRUE(net);
    ASSERT_EQ(net->init(), tools::kNetSuccess);
    tools::NetHandle handle;
    void* listen_comm = nullptr;
    EXPECT_NE(net->listen(99, &handle, &listen_comm), tools::kNetSuccess);  // no device 99: a warning
  }
  const std::string text = capture.text();
  size_t lines = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    ++lines;
    EXPECT_EQ(line.rfind("WARN NET/Sieve ", 0), 0u) << line;
    EXPECT_EQ(line.find("NCCL"), std::string::npos) << line;
    EXPECT_EQ(line.find(".cc:"), std::string::npos) << "a source path: " << line;
  }
  EXPECT_EQ(lines, 2u) << text;  // the misspelt variable, the missing device
}

}  // namespace
}  // namespace sieve::conformance
