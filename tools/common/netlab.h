// SPDX-License-Identifier: Apache-2.0
// A namespace lab from tools/share/netlab.sh for tests and tools: N nodes (namespaces) on a virtual
// switch with addresses 10.77.0.(i+1), optionally shaped, removed by the destructor even when the
// caller fails half-way.
#pragma once

#include <string>

namespace sieve::tools {

// netlab.sh as the running tool's layout has it (tools/common/install_layout.h).
std::string default_netlab_script();

// Two or more namespaces on a virtual switch, removed by the destructor (even after a failed assert).
class NetLab {
 public:
  // Empty when the lab can run here; otherwise why not (not root, no `ip`, no namespaces).
  static std::string unavailable_reason();
  // `extra_options` go to `netlab.sh up` (--p2p, --rate 1gbit, ...). The prefix is unique per process
  // and per lab, so parallel callers never collide.
  NetLab(int nodes, const std::string& extra_options, const std::string& script = default_netlab_script());
  ~NetLab();
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string ns(int node) const;
  std::string addr(int node) const;
  static const char* ifname() { return "eth0"; }
  // Runs `netlab.sh --prefix <this lab> <arguments>` (impair-stats 1, exec 0 cat /proc/net/dev, ...):
  // its output, *status its exit status.
  std::string command(const std::string& arguments, int* status) const;
  // Packets node's egress shaper (tbf) has held back for want of tokens since the lab came up: what a
  // sender at the shaper's rate pays a timer for each of. -1 when the node has no shaper.
  long long shaper_holds(int node) const;

 private:
  std::string script_;
  std::string prefix_;
  bool ok_ = false;
  std::string error_;
};

// The held-back count (`overlimits`) of the tbf qdisc in `tc -s qdisc show` output; -1 when none.
long long tbf_overlimits(const std::string& tc_stats);

// The links the tools emulate (namespaces joined by veth and shaped by tc, or loopback shaped by the
// plugin's rate limiter) carry IP: only the TCP transport's traffic passes through them. The tools
// run Sieve's peers with SIEVE_TRANSPORT=tcp, and refuse an environment that asks for verbs rather
// than report figures of a transport the emulation does not touch.
constexpr const char* kEmulatedLinkTransport = "tcp";  // the SIEVE_TRANSPORT of the tools' peers
// "" when SIEVE_TRANSPORT is unset, auto or tcp; else one line for `tool` to print, saying why not.
std::string emulated_link_transport_conflict(const std::string& tool);

// The output (stdout and stderr) of a shell command; *status gets its exit status (-1 if none).
std::string run_command(const std::string& command, int* status);

}  // namespace sieve::tools
