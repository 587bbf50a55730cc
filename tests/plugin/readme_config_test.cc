// The README's configuration table is what users read: it must name every variable of the
// registry, and nothing the registry does not know.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "plugin/config.h"

#ifndef SIEVE_SOURCE_DIR
#error "SIEVE_SOURCE_DIR must point at the source tree"
#endif

namespace sieve::config {
namespace {

std::set<std::string> table_rows() {
  std::ifstream in(std::string(SIEVE_SOURCE_DIR) + "/README.md");
  EXPECT_TRUE(in.good()) << "README.md not found under " << SIEVE_SOURCE_DIR;
  // A table row starts "| `SIEVE_NAME` |".
  const std::string open = "| `SIEVE_";
  std::set<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, open.size(), open) != 0) continue;
    size_t close = line.find('`', 3);
    if (close != std::string::npos) names.insert(line.substr(3, close - 3));
  }
  return names;
}

TEST(ReadmeConfigTable, ListsEveryRegistryVariableAndNoOther) {
  std::set<std::string> documented = table_rows();
  std::set<std::string> declared;
  for (const auto& p : params()) declared.insert(p.name);
  for (const auto& name : declared) EXPECT_TRUE(documented.count(name)) << name << " has no README table row";
  for (const auto& name : documented) EXPECT_TRUE(declared.count(name)) << name << " is in the README but not the registry";
}

}  // namespace
}  // namespace sieve::config
