// SPDX-License-Identifier: Apache-2.0
// sieve-info: what the Sieve plugin sees on this machine (or in an hwloc XML topology): its
// version and exported ABI versions, NICs, GPUs, the GPU x NIC distance matrix, and the effective
// SIEVE_* configuration. Text by default, --json for machines.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "plugin/sieve.h"
#include "tools/sieve-info/output.h"
#include "tools/sieve-info/report.h"

#include "tools/common/install_layout.h"
#include "tools/sieve-info/masks_command.h"

namespace {

void usage(std::ostream& out) {
  out << "usage: sieve-info [--json] [--topo FILE] [--plugin PATH] [--no-plugin] [--require CAP[,CAP...]]\n"
         "       sieve-info masks FILE [--json]   (sieve-info masks --help)\n"
         "       sieve-info --help | --version\n"
         "\n"
         "What the Sieve plugin sees on this machine, loaded as NCCL loads it: the library, its version and\n"
         "ncclNetPlugin_vN tables, the devices it offers NCCL (with the sockets and helper threads a\n"
         "connection gets), every NIC and NVIDIA GPU with its PCI placement, the GPU x NIC matrix in\n"
         "nvidia-smi topo -m terms, the RDMA ports libibverbs lists, the transport SIEVE_TRANSPORT picks and\n"
         "why, and every SIEVE_* variable with its value and source (secrets are never printed). Where hwloc\n"
         "sees no PCI devices (VMs, containers) NIC placement comes from sysfs, and the output says so.\n"
         "As a health check (a Slurm prolog), its exit status says whether a job would run as configured.\n"
         "\n"
         "  --json         machine-readable output\n"
         "  --topo FILE    describe the machine of this hwloc XML (lstopo --of xml) instead of this one\n"
         "                 (default: SIEVE_TOPO_FILE, else the live machine); the plugin's devices\n"
         "                 are still this machine's\n"
         "  --plugin PATH  the plugin library to inspect: a path, or a name NCCL would be given\n"
         "                 (NCCL_NET_PLUGIN=sieve: libnccl-net-sieve.so, found by the dynamic loader as\n"
         "                 NCCL finds it); default: the installed library (see Files), else by name\n"
         "  --no-plugin    do not load the plugin\n"
         "  --require CAP[,CAP...]\n"
         "                 fail unless the library has each capability (sieve_capabilities()): proxy\n"
         "                 (the collective proxy LD_PRELOAD needs; CUDA builds), cuda-compact,\n"
         "                 host-compact, verbs\n"
         "  -h, --help     this text\n"
         "  --version      the tool and Sieve's version\n"
         "\n"
         "Exit status: 0 all well; 1 a problem a job would hit (the plugin cannot load or start or\n"
         "offers no device, the topology cannot be read, a SIEVE_* variable is unknown or refused),\n"
         "each reason on stderr; 2 a bad command line.\n"
         "\n"
         "Files (PREFIX is where sieve-info is installed: /usr for /usr/bin/sieve-info):\n"
         "  PREFIX/"
      << sieve::tools::installed_libdir()
      << "/libnccl-net-sieve.so   the library inspected by default\n"
         "Run from a build tree, sieve-info inspects that build's library.\n";
}

// --require's list: known capability names only, so a typo fails the command line, not the check.
bool parse_required(const std::string& names, std::vector<std::string>* into) {
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = std::min(names.find(',', start), names.size());
    const std::string name = names.substr(start, comma - start);
    bool known = false;
    for (const auto& capability : sieve::info::capabilities()) known = known || name == capability.name;
    if (!known) {
      std::cerr << "sieve-info: --require: unknown capability '" << name << "' (";
      const char* separator = "";
      for (const auto& capability : sieve::info::capabilities()) {
        std::cerr << separator << capability.name;
        separator = ", ";
      }
      std::cerr << ")\n";
      return false;
    }
    into->push_back(name);
    start = comma + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "masks") {
    return sieve_info_masks(std::vector<std::string>(args.begin() + 1, args.end()), std::cout, std::cerr);
  }

  sieve::info::ReportOptions options;
  bool json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto next = [&](std::string& into) {
      if (i + 1 >= args.size()) {
        std::cerr << "sieve-info: " << arg << " needs a value\n";
        return false;
      }
      into = args[++i];
      return true;
    };
    if (arg == "--json") {
      json = true;
    } else if (arg == "--topo") {
      if (!next(options.topo_file)) return 2;
    } else if (arg == "--plugin") {
      if (!next(options.plugin_path)) return 2;
    } else if (arg == "--require") {
      std::string names;
      if (!next(names)) return 2;
      if (!parse_required(names, &options.required)) return 2;
    } else if (arg == "--no-plugin") {
      options.skip_plugin = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(std::cout);
      return 0;
    } else if (arg == "--version") {
      std::cout << "sieve-info " << SIEVE_VERSION_STRING << "\n";
      return 0;
    } else {
      std::cerr << "sieve-info: unknown argument '" << arg << "'\n";
      usage(std::cerr);
      return 2;
    }
  }

  const sieve::info::Report report = sieve::info::gather(options);
  if (json) {
    sieve::info::print_json(report, std::cout);
  } else {
    sieve::info::print_text(report, std::cout);
  }
  // A health check (a Slurm prolog) needs the verdict in the exit status and the reasons on stderr:
  // whatever would make a job run without Sieve, or other than configured, fails it.
  for (const auto& problem : report.problems) std::cerr << "sieve-info: " << problem << "\n";
  return report.problems.empty() ? 0 : 1;
}
