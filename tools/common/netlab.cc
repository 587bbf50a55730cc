// SPDX-License-Identifier: Apache-2.0
#include "tools/common/netlab.h"

#include "plugin/config.h"
#include "tools/common/install_layout.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

namespace sieve::tools {

std::string run_command(const std::string& command, int* status) {
  std::string output;
  // Grouped, so the error output of every part of a compound command is captured, not only the last's.
  FILE* pipe = popen(("{ " + command + "\n} 2>&1").c_str(), "r");
  if (!pipe) {
    if (status) *status = -1;
    return output;
  }
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
  const int raw = pclose(pipe);
  if (status) *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return output;
}

std::string default_netlab_script() { return InstallLayout::current().script("netlab.sh"); }

std::string NetLab::unavailable_reason() {
  if (geteuid() != 0) return "needs root to create network namespaces";
  int status = 0;
  run_command("ip -V", &status);
  if (status != 0) return "needs iproute2 (`ip`)";
  // What a lab does first: a namespace with a veth pair in it. Root without CAP_NET_ADMIN (a
  // container) may create the namespace and still fail here.
  const std::string probe = "sieve-probe-" + std::to_string(getpid());
  std::string out = run_command("ip netns add " + probe + " && ip -n " + probe +
                                    " link add probe0 type veth peer name probe1; status=$?; ip netns del " + probe +
                                    " 2>/dev/null; exit $status",
                                &status);
  if (status == 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const size_t last_line = out.rfind('\n');
  if (last_line != std::string::npos) out = out.substr(last_line + 1);
  return "cannot create network namespaces here: " +
         (out.empty() ? "`ip netns add` failed (exit status " + std::to_string(status) + ")" : out);
}

namespace {
// Labs are named sc<pid>x<n>; a process killed before its destructor ran (a test timeout) leaves its
// lab behind, so every new lab first removes the labs of processes that no longer exist.
void remove_orphaned_labs(const std::string& script) {
  int status = 0;
  std::istringstream names(run_command("ip netns list", &status));
  std::set<std::string> orphans;
  for (std::string line; std::getline(names, line);) {
    unsigned pid = 0, lab = 0;
    char suffix[8] = {};
    if (sscanf(line.c_str(), "sc%ux%u-%7s", &pid, &lab, suffix) != 3) continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      orphans.insert("sc" + std::to_string(pid) + "x" + std::to_string(lab));
    }
  }
  for (const auto& prefix : orphans) run_command(script + " --prefix " + prefix + " down", &status);
}
}  // namespace

NetLab::NetLab(int nodes, const std::string& extra_options, const std::string& script) : script_(script) {
  remove_orphaned_labs(script_);
  // Unique per process and per lab: ctest runs tests in parallel.
  static std::atomic<int> labs{0};
  prefix_ = "sc" + std::to_string(getpid()) + "x" + std::to_string(labs++);
  int status = 0;
  // --owner: a later `up` removes this lab if this process dies without running the destructor.
  const std::string out = run_command(script_ + " --prefix " + prefix_ + " up " + std::to_string(nodes) + " --owner " +
                                          std::to_string(getpid()) + " " + extra_options,
                                      &status);
  ok_ = status == 0;
  if (!ok_) error_ = out;
}

NetLab::~NetLab() {
  int status = 0;
  run_command(script_ + " --prefix " + prefix_ + " down", &status);
}

std::string NetLab::command(const std::string& arguments, int* status) const {
  return run_command(script_ + " --prefix " + prefix_ + " " + arguments, status);
}

long long NetLab::shaper_holds(int node) const {
  int status = 0;
  const std::string out =
      command("exec " + std::to_string(node) + " tc -s qdisc show dev " + std::string(ifname()), &status);
  return status == 0 ? tbf_overlimits(out) : -1;
}

long long tbf_overlimits(const std::string& tc_stats) {
  // qdisc tbf 10: root refcnt 3 rate 10Gbit burst 4998750b lat 50ms
  //  Sent 34115882089 bytes 22575204 pkt (dropped 0, overlimits 32847 requeues 0)
  const size_t tbf = tc_stats.find("qdisc tbf ");
  if (tbf == std::string::npos) return -1;
  const size_t next_qdisc = tc_stats.find("qdisc ", tbf + 1);
  const size_t at = tc_stats.find("overlimits ", tbf);
  if (at == std::string::npos || (next_qdisc != std::string::npos && at > next_qdisc)) return -1;
  char* end = nullptr;
  const char* digits = tc_stats.c_str() + at + std::strlen("overlimits ");
  const long long n = std::strtoll(digits, &end, 10);
  return end == digits || n < 0 ? -1 : n;
}

std::string NetLab::ns(int node) const { return prefix_ + "-n" + std::to_string(node); }
std::string NetLab::addr(int node) const { return "10.77.0." + std::to_string(node + 1); }

std::string emulated_link_transport_conflict(const std::string& tool) {
  // Read as the plugin reads it (case, spaces; a value it refuses leaves auto, and the peers warn).
  const config::Registry registry(config::environment_snapshot());
  if (registry.settings().transport != config::TransportChoice::kIb) return "";
  return "SIEVE_TRANSPORT=ib: " + tool +
         " measures over emulated IP links (network namespaces shaped by tc, "
         "or loopback), which only the TCP transport's traffic crosses; unset SIEVE_TRANSPORT (" +
         tool + " runs its peers with SIEVE_TRANSPORT=tcp)";
}

}  // namespace sieve::tools
