// SPDX-License-Identifier: Apache-2.0
// sieve-perf's command line. Every value is checked here, before any process, lab or iperf3 run
// starts, and a bad one is reported naming its option.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sieve::perf {

struct Options {
  std::vector<std::string> links = {"loopback", "veth", "veth-1g", "veth-10g"};
  double seconds = 10;
  size_t size = 4u << 20;
  int window = 8;
  int abi = 0;         // ncclNetPlugin_vN to load: 0 = the newest the library exports, else 8..12
  std::string plugin;  // "" until resolved: the installed library, else the build tree's (--plugin)
  bool plugin_given = false;
  int iperf_streams = 1;
  int poll_us = 1000;
  // How the peers drive test(): "sleep" sleeps poll_us after a test that completed nothing; "spin"
  // tests again at once, yielding the core (sched_yield), as NCCL 2.28's proxy progress loop does.
  std::string driver = "sleep";
  int busy = 0;         // threads burning CPU in sieve-perf during every run (a busy node)
  std::string compare;  // another ext-net plugin driven the same way, runs alternating with Sieve's
  int runs = 1;         // runs per link and transport; medians are reported
  int zeros_percent = 0;
  int word = 4;
  std::string json;
  bool strict = false;
  // Internal: one end of the plugin stream, started by the driver.
  std::string peer_role;  // "send" | "recv" | "" (the driver)
  std::string handle;     // sender: the receiver's handle, hex
  // Resolved before the first run: the ncclNetPlugin_vN the peers load (--abi, or the newest exported).
  int abi_loaded = 0;
  bool help = false;     // --help: print usage_text() and exit 0
  bool version = false;  // --version: print the tool's name and version and exit 0
};

// The links sieve-perf knows, and the tc rate each is shaped to ("" = unshaped).
const std::vector<std::string>& known_links();
std::string link_rate(const std::string& link);
bool link_needs_lab(const std::string& link);

// False with *error naming the option and what it accepts.
bool parse_options(int argc, char** argv, Options* options, std::string* error);
std::string usage_text();
// Every option parse_options accepts (for the test that --help lists them all).
std::vector<std::string> option_names();

}  // namespace sieve::perf
