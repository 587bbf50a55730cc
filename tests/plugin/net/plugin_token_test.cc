// SPDX-License-Identifier: Apache-2.0
// The plugin refuses to start with a weak SIEVE_JOB_TOKEN, saying the rule. Its own executable: the
// registry reads the environment once per process.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "plugin/net/net_plugin.h"

namespace sieve::plugin {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_lines;

void logger(abi::ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char line[1200];
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_lines.emplace_back(line);
}

TEST(PluginJobToken, AWeakTokenFailsInitAndSaysTheRule) {
  setenv("SIEVE_SOCKET_IFNAME", "=lo", 1);
  setenv("SIEVE_JOB_TOKEN", "hunter2", 1);
  void* ctx = nullptr;
  EXPECT_EQ(net_init_context(&ctx, 1, -1, logger), abi::ncclInvalidUsage);
  std::lock_guard<std::mutex> lock(g_mutex);
  bool said = false;
  for (const auto& l : g_lines) {
    said = said || l.find("at least 128") != std::string::npos;
    EXPECT_EQ(l.find("hunter2"), std::string::npos) << l;
  }
  EXPECT_TRUE(said) << "no line says the rule";
  if (ctx) net_finalize(ctx);
}

}  // namespace
}  // namespace sieve::plugin
