// SPDX-License-Identifier: Apache-2.0
// The namespace lab sieve-bench's runs share (tools/share/netlab.sh): brought up for a run, removed on every
// exit path through the destructor.
#pragma once

#include <string>

#include "tools/sieve-bench/options.h"

namespace sieve::bench {

class Lab {
 public:
  // `impairer`: sieve-impair as this installation or build has it ("" = netlab.sh looks for it).
  Lab(std::string script, std::string prefix, std::string impairer)
      : script_(std::move(script)), prefix_(std::move(prefix)), impairer_(std::move(impairer)) {}
  ~Lab() { down(); }
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;
  // `nodes` namespaces on one switch shaped as `o` says (--rate, --delay, ...); its reason on stderr.
  bool up(const Options& o, int nodes);
  void down();
  std::string ns(int node) const { return prefix_ + "-n" + std::to_string(node); }

 private:
  std::string script_, prefix_, impairer_;
  bool up_ = false;
};

}  // namespace sieve::bench
