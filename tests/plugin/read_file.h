// SPDX-License-Identifier: Apache-2.0
// The whole contents of a file the code under test wrote ("" when it cannot be read).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace sieve::plugin::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace sieve::plugin::testing
