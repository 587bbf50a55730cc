// SPDX-License-Identifier: Apache-2.0
// The sieve-bench commands the README and docs/PERFORMANCE.md show are commands sieve-bench takes:
// every line of theirs that starts with build/tools/sieve-bench/sieve-bench (a shell example or a
// measurement's command) parses, its comment left out.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/sieve-bench/options.h"

namespace sieve::bench {
namespace {

constexpr char kCommand[] = "build/tools/sieve-bench/sieve-bench";

std::vector<std::string> shown_commands(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " not found";
  std::vector<std::string> commands;
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line.compare(start, sizeof kCommand - 1, kCommand) != 0) continue;
    commands.push_back(
        line.substr(start, line.find('#') == std::string::npos ? std::string::npos : line.find('#') - start));
  }
  return commands;
}

TEST(Docs, EveryShownSieveBenchCommandParses) {
  size_t fsdp = 0, total = 0;
  for (const char* doc : {"/README.md", "/docs/PERFORMANCE.md"}) {
    for (const std::string& command : shown_commands(std::string(SIEVE_SOURCE_DIR) + doc)) {
      std::istringstream words(command);
      std::vector<std::string> args;
      for (std::string word; words >> word;) args.push_back(word);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      Options o;
      std::string message;
      bool help = false;
      EXPECT_TRUE(parse_options(static_cast<int>(argv.size()), argv.data(), &o, &message, &help))
          << doc << ": " << command << "\n"
          << message;
      fsdp += o.fsdp ? 1 : 0;
      ++total;
    }
  }
  EXPECT_GE(total, 4u);
  EXPECT_GE(fsdp, 2u);  // README's example and PERFORMANCE.md's measurements
}

}  // namespace
}  // namespace sieve::bench
