// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-perf/perf_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "tools/common/install_layout.h"

namespace sieve::perf {
namespace {

bool parse_int(const std::string& text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < lo || value > hi) return false;
  *out = static_cast<int>(value);
  return true;
}

bool parse_size(const std::string& text, size_t* out) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value > 0)) return false;
  double scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1024, ++end;
  else if (*end == 'M' || *end == 'm') scale = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') scale = 1024.0 * 1024 * 1024, ++end;
  if (*end || value * scale > 1024.0 * 1024 * 1024 || value * scale < 1) return false;
  *out = static_cast<size_t>(value * scale);
  return true;
}

const char* const kFlags[] = {"--help", "--version", "--strict", "--smoke"};
const char* const kValued[] = {"--links",         "--seconds", "--size",   "--window", "--abi",     "--plugin",
                               "--iperf-streams", "--poll-us", "--driver", "--busy",   "--compare", "--runs",
                               "--zeros",         "--word",    "--json",   "--peer",   "--handle"};

}  // namespace

const std::vector<std::string>& known_links() {
  static const std::vector<std::string> links = {"loopback", "veth", "veth-1g", "veth-10g"};
  return links;
}

std::string link_rate(const std::string& link) {
  if (link == "veth-1g") return "1gbit";
  if (link == "veth-10g") return "10gbit";
  return "";
}

bool link_needs_lab(const std::string& link) { return link != "loopback"; }

std::vector<std::string> option_names() {
  std::vector<std::string> names(std::begin(kFlags), std::end(kFlags));
  names.insert(names.end(), std::begin(kValued), std::end(kValued));
  return names;
}

std::string usage_text() {
  return "usage: sieve-perf [options]\n"
         "Streams through the Sieve plugin between two processes (loaded as NCCL loads it) and runs iperf3\n"
         "on the same link in the same run; reports Gbit/s and CPU seconds per GB of both. Links other than\n"
         "loopback are network namespaces (netlab.sh) and need root with CAP_NET_ADMIN.\n\n"
         "  --links LIST          loopback,veth,veth-1g,veth-10g (default: all four)\n"
         "  --seconds S           seconds per run, more than 0, at most 3600 (default 10)\n"
         "  --size BYTES          message size, 1 byte to 1G, K/M/G suffixes (default 4M)\n"
         "  --window N            messages outstanding, 1 to 32 (default 8)\n"
         "  --abi N               ncclNetPlugin_vN to load: 8 to 12, or 0 = the newest exported (default 0)\n"
         "  --plugin PATH         libnccl-net-sieve.so to load (default: the installed one, see Files)\n"
         "  --iperf-streams N     iperf3 -P, 1 to 32 (default 1)\n"
         "  --poll-us N           the sleep driver's pause after a test() that completed nothing, 0 to\n"
         "                        1000000 us (default 1000)\n"
         "  --driver sleep|spin   sleep: pause --poll-us when nothing completed; spin: test again at once,\n"
         "                        yielding the core, as NCCL's proxy thread does (default sleep)\n"
         "  --busy N              N threads burning CPU during every run, 0 to 64: a busy node (default 0)\n"
         "  --compare PLUGIN.so   also stream through this ext-net plugin (ncclNetPlugin_v8..v12), driven\n"
         "                        the same way, runs alternating with Sieve's; e.g. NCCL's own socket\n"
         "                        transport built from NCCL's sources on a GPU-less host, as\n"
         "                        PREFIX/share/doc/sieve/PERFORMANCE.md describes (Sieve's source\n"
         "                        tree carries the script)\n"
         "  --runs N              runs per link and transport, 1 to 99; medians reported (default 1)\n"
         "  --zeros PERCENT       share of the streamed words that is zero, 0 to 100 (default 0)\n"
         "  --word 4|2            word size of that data: 4 (fp32) or 2 (bf16) (default 4)\n"
         "  --json FILE           also write the results as JSON to FILE (checked before the first run)\n"
         "  --strict              exit 1 when a shaped link misses its bar (>= 95 % of iperf3's Gbit/s,\n"
         "                        <= 1.5x its CPU per GB)\n"
         "  --smoke               loopback only, 1 s, 1 MiB messages\n"
         "  --version             print the version and exit\n"
         "  --help                print this and exit\n"
         "  (--peer send|recv and --handle HEX start one end of the stream; sieve-perf uses them itself)\n"
         "\n"
         "Ctrl-C or SIGTERM stops the run: its processes are stopped and its namespaces removed.\n"
         "Exit status: 0 measured; 1 a link could not be measured, or missed its bar with --strict;\n"
         "2 a bad command line or setting; 128 + N when stopped by signal N.\n"
         "\n"
         "Files (PREFIX is where sieve-perf is installed: /usr for /usr/bin/sieve-perf):\n"
         "  PREFIX/" +
         tools::installed_libdir() +
         "/libnccl-net-sieve.so   the plugin streamed through\n"
         "  PREFIX/share/sieve/netlab.sh           the namespace lab\n"
         "Run from a build tree, sieve-perf uses that build's library and its source tree's netlab.sh.\n";
}

bool parse_options(int argc, char** argv, Options* o, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") {
      o->help = true;
      continue;
    }
    if (key == "--version") {
      o->version = true;
      continue;
    }
    if (key == "--strict") {
      o->strict = true;
      continue;
    }
    if (key == "--smoke") {
      o->links = {"loopback"}, o->seconds = 1, o->size = 1u << 20;
      continue;
    }
    if (std::find(std::begin(kValued), std::end(kValued), key) == std::end(kValued)) {
      *error = "unknown option '" + key + "' (--help lists them)";
      return false;
    }
    if (i + 1 >= argc) {
      *error = key + " needs a value";
      return false;
    }
    const std::string value = argv[++i];
    auto bad = [&](const std::string& accepts) {
      *error = key + " '" + value + "': " + accepts;
      return false;
    };
    if (key == "--links") {
      o->links.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) {
        if (std::find(known_links().begin(), known_links().end(), item) == known_links().end())
          return bad("unknown link '" + item + "' (loopback, veth, veth-1g, veth-10g)");
        o->links.push_back(item);
      }
      if (o->links.empty()) return bad("name at least one link");
    } else if (key == "--seconds") {
      char* end = nullptr;
      const double seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !(seconds > 0) || seconds > 3600) return bad("seconds, more than 0, at most 3600");
      o->seconds = seconds;
    } else if (key == "--size") {
      if (!parse_size(value, &o->size)) return bad("bytes from 1 to 1G, like 4M");
    } else if (key == "--window") {
      if (!parse_int(value, 1, 32, &o->window)) return bad("1 to 32 (NCCL's requests per comm)");
    } else if (key == "--abi") {
      if (!parse_int(value, 0, 12, &o->abi) || (o->abi != 0 && o->abi < 8)) return bad("8 to 12, or 0 = the newest");
    } else if (key == "--plugin") {
      if (value.empty()) return bad("a path");
      o->plugin = value;
      o->plugin_given = true;
    } else if (key == "--iperf-streams") {
      if (!parse_int(value, 1, 32, &o->iperf_streams)) return bad("1 to 32");
    } else if (key == "--poll-us") {
      if (!parse_int(value, 0, 1000000, &o->poll_us)) return bad("0 to 1000000");
    } else if (key == "--driver") {
      if (value != "sleep" && value != "spin") return bad("sleep or spin");
      o->driver = value;
    } else if (key == "--busy") {
      if (!parse_int(value, 0, 64, &o->busy)) return bad("0 to 64 threads");
    } else if (key == "--compare") {
      if (value.empty()) return bad("a plugin path");
      o->compare = value;
    } else if (key == "--runs") {
      if (!parse_int(value, 1, 99, &o->runs)) return bad("1 to 99");
    } else if (key == "--zeros") {
      if (!parse_int(value, 0, 100, &o->zeros_percent)) return bad("a percentage, 0 to 100");
    } else if (key == "--word") {
      if (!parse_int(value, 2, 4, &o->word) || o->word == 3) return bad("4 (fp32) or 2 (bf16)");
    } else if (key == "--json") {
      if (value.empty()) return bad("a file name");
      o->json = value;
    } else if (key == "--peer") {
      if (value != "send" && value != "recv") return bad("send or recv");
      o->peer_role = value;
    } else if (key == "--handle") {
      o->handle = value;
    }
  }
  return true;
}

}  // namespace sieve::perf
