// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/lab.h"

#include <unistd.h>

#include <cstdlib>

namespace sieve::bench {

namespace {

bool run_command(const std::string& command) { return std::system(command.c_str()) == 0; }

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool impaired(const Options& o) { return !(o.delay.empty() && o.loss.empty() && o.reorder.empty()); }

}  // namespace

bool Lab::up(const Options& o, int nodes) {
  // --owner: if this process is killed (SIGKILL, OOM) the next lab's `up`, or `netlab.sh down --all`,
  // removes this lab and its sieve-impair daemons.
  std::string command = "bash " + shell_quote(script_) + " --prefix " + prefix_ + " up " + std::to_string(nodes) +
                        " --owner " + std::to_string(getpid());
  if (!o.rate.empty()) command += " --rate " + shell_quote(o.rate);
  if (!o.delay.empty()) command += " --delay " + shell_quote(o.delay);
  if (!o.jitter.empty()) command += " --jitter " + shell_quote(o.jitter);
  if (!o.loss.empty()) command += " --loss " + shell_quote(o.loss);
  if (!o.reorder.empty()) command += " --reorder " + shell_quote(o.reorder);
  if (impaired(o) && !impairer_.empty()) command += " --impair " + shell_quote(impairer_);
  command += " >&2";
  up_ = true;  // a half-built lab is removed too
  return run_command(command);
}

void Lab::down() {
  if (!up_) return;
  up_ = false;
  run_command("bash " + shell_quote(script_) + " --prefix " + prefix_ + " down >/dev/null 2>&1");
}

}  // namespace sieve::bench
