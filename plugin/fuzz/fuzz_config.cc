// SPDX-License-Identifier: Apache-2.0
// Fuzzes the SIEVE_* registry as the environment feeds it: lines NAME=VALUE (known names, near
// misses, garbage) become the snapshot a Registry is built from. Every value in force must be one
// its variable accepts; each typed parser must agree with in_range on what parses.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "plugin/config.h"

using namespace sieve::config;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) {
      std::string name = line.substr(0, eq);
      // Short names stand for the registry's: the fuzzer reaches every variable without spelling it.
      if (name.size() == 1) name = params()[static_cast<uint8_t>(name[0]) % params().size()].name;
      // Unknown names cost an edit distance against every variable: keep them short, as real ones are.
      if (name.size() > 48) name.resize(48);
      env[name] = line.substr(eq + 1);
    }
    start = end + 1;
  }
  const Registry registry(env);
  for (const Effective& e : registry.effective()) {
    if (!e.info) std::abort();
    if (e.info->kind == Kind::kInt || e.info->kind == Kind::kSize) {
      if (!in_range(*e.info, e.value)) std::abort();
    }
    int chosen = 0;
    if (e.info->kind == Kind::kChoice && !parse_choice(e.value, e.info->choices, chosen)) std::abort();
  }
  for (const auto& [name, value] : env) {
    bool b;
    int64_t i;
    uint64_t s;
    parse_bool(value, b);
    parse_int(value, i);
    parse_size(value, s);
  }
  return 0;
}
