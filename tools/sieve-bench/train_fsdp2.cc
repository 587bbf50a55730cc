// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/train_fsdp2.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tools/common/install_layout.h"
#include "tools/common/json_writer.h"
#include "tools/common/netlab.h"
#include "tools/common/stop_signal.h"
#include "tools/sieve-bench/gloo_peer.h"
#include "tools/sieve-bench/lab.h"

namespace sieve::bench {

namespace {

using Clock = std::chrono::steady_clock;

// What one rank printed: its one-line JSON, written by fsdp2_train.py, so regular.
struct RankResult {
  std::string text;
  std::vector<double> losses, seconds, comm, tx;
  std::string digest;
};

std::vector<double> numbers(const std::string& text, const std::string& key) {
  std::vector<double> values;
  const size_t at = text.find("\"" + key + "\":[");
  if (at == std::string::npos) return values;
  const char* p = text.c_str() + at + key.size() + 4;
  while (*p && *p != ']') {
    char* end = nullptr;
    values.push_back(std::strtod(p, &end));
    if (end == p) break;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  return values;
}

double number(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\":");
  return at == std::string::npos ? 0 : std::strtod(text.c_str() + at + key.size() + 3, nullptr);
}

std::string string_of(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\":\"");
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 4;
  return text.substr(begin, text.find('"', begin) - begin);
}

float loss_value(double bits) {
  const uint32_t word = static_cast<uint32_t>(bits);
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct ModeRun {
  std::string mode, error;
  std::vector<RankResult> ranks;
};

// Runs the N ranks of one mode, each in its namespace, until all printed and exited or the deadline.
void run_ranks(const Options& o, const Lab& lab, const std::string& python, const std::string& script,
               const std::string& mode, int port, Clock::time_point deadline, ModeRun* run) {
  run->mode = mode;
  const long seconds_left =
      std::max<long>(5, std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count());
  struct Child {
    pid_t pid = -1;
    int out = -1;
    bool eof = false;
  };
  std::vector<Child> children(o.nodes);
  run->ranks.assign(o.nodes, RankResult());
  for (int rank = 0; rank < o.nodes; ++rank) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return void(run->error = std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const std::string path = "/var/run/netns/" + lab.ns(rank);
      const int ns = open(path.c_str(), O_RDONLY);
      if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(97);
      dup2(fds[1], STDOUT_FILENO);
      const std::vector<std::string> args = {python,      script,
                                             "--rank",    std::to_string(rank),
                                             "--world",   std::to_string(o.nodes),
                                             "--master",  "10.77.0.1",
                                             "--port",    std::to_string(port),
                                             "--ifname",  "eth0",
                                             "--model",   o.train_model,
                                             "--mode",    mode,
                                             "--steps",   std::to_string(o.steps),
                                             "--timeout", std::to_string(seconds_left)};
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(python.c_str(), argv.data());
      _exit(98);
    }
    close(fds[1]);
    children[rank] = {pid, fds[0], pid < 0};
    if (pid < 0) return void(run->error = std::string("fork: ") + std::strerror(errno));
  }
  while (run->error.empty()) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < o.nodes; ++i) {
      if (!children[i].eof) fds.push_back({children[i].out, POLLIN, 0}), which.push_back(i);
    }
    if (fds.empty()) break;
    if (tools::stop_signal()) run->error = "interrupted by " + tools::stop_signal_name();
    else if (Clock::now() > deadline) run->error = "timed out (--timeout S sets the run's deadline)";
    if (!run->error.empty()) break;
    if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t n = read(fds[k].fd, buffer, sizeof buffer);
      if (n <= 0) children[which[k]].eof = true;
      else run->ranks[which[k]].text.append(buffer, static_cast<size_t>(n));
    }
  }
  for (int rank = 0; rank < o.nodes; ++rank) {
    Child& c = children[rank];
    int status = 0;
    if (c.pid > 0) {
      if (!run->error.empty()) kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
    }
    if (c.out >= 0) close(c.out);
    RankResult& r = run->ranks[rank];
    if (run->error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      const std::string said = string_of(r.text, "error");
      run->error =
          "rank " + std::to_string(rank) + " failed" + (said.empty() ? " (its messages are above)" : ": " + said);
    }
    r.losses = numbers(r.text, "losses");
    r.seconds = numbers(r.text, "seconds");
    r.comm = numbers(r.text, "comm_seconds");
    r.tx = numbers(r.text, "tx_bytes");
    r.digest = string_of(r.text, "digest");
  }
}

// Per step, the mean over nodes of the bytes each node's interface sent.
std::vector<double> wire_per_node(const ModeRun& run) {
  std::vector<double> wire(run.ranks[0].tx.size(), 0);
  for (const RankResult& r : run.ranks) {
    for (size_t s = 0; s < wire.size() && s < r.tx.size(); ++s) wire[s] += r.tx[s] / run.ranks.size();
  }
  return wire;
}

bool same_digests(const ModeRun& a, const ModeRun& b) {
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    if (a.ranks[i].digest.empty() || a.ranks[i].digest != b.ranks[i].digest) return false;
  }
  return true;
}

// The largest |loss - FSDP2's loss| over the steps, over all ranks.
double largest_difference(const ModeRun& base, const ModeRun& other) {
  double largest = 0;
  for (size_t i = 0; i < base.ranks.size(); ++i) {
    for (size_t s = 0; s < base.ranks[i].losses.size() && s < other.ranks[i].losses.size(); ++s) {
      largest = std::max(largest, std::fabs(static_cast<double>(loss_value(base.ranks[i].losses[s])) -
                                            loss_value(other.ranks[i].losses[s])));
    }
  }
  return largest;
}

// What --train fsdp2 needs before anything starts: a known model, root and the namespace lab, the
// Python, the training script and netlab.sh. 0, or the exit status after saying why.
int check_train_setup(const Options& o, const tools::InstallLayout& layout, std::string* script, std::string* netlab,
                      std::string* python) {
  if (o.train_model != "transformer" && o.train_model != "transformer-23m" && o.train_model != "resnet18") {
    std::fprintf(stderr, "sieve-bench: --train-model: transformer, transformer-23m or resnet18, not %s\n",
                 o.train_model.c_str());
    return 2;
  }
  if (geteuid() != 0 || o.loopback) {
    std::fprintf(stderr, "sieve-bench: --train fsdp2 runs in the namespace lab: run as root, without --loopback\n");
    return 2;
  }
  const std::string why_not = tools::NetLab::unavailable_reason();
  if (!why_not.empty()) {
    std::fprintf(stderr, "sieve-bench: --train fsdp2 needs the namespace lab (%s)\n", why_not.c_str());
    return 2;
  }
  *script = layout.script("fsdp2_train.py");
  *netlab = !o.netlab.empty() ? o.netlab : layout.script("netlab.sh");
  *python = gloo_python(o.python);  // --python, else python3 on PATH, as the Gloo peer's
  if (access(python->c_str(), X_OK) != 0) {
    std::fprintf(stderr, "sieve-bench: --python %s is not an executable (a Python with torch >= 2.11)\n",
                 python->c_str());
    return 2;
  }
  if (access(script->c_str(), R_OK) != 0 || access(netlab->c_str(), R_OK) != 0) {
    std::fprintf(stderr, "sieve-bench: %s or %s not found\n", script->c_str(), netlab->c_str());
    return 2;
  }
  return 0;
}

// The run's header and every mode's losses, times and wire bytes per step, as rank 0 saw them.
void print_steps(const Options& o, const std::vector<ModeRun>& runs) {
  const std::string& head = runs[0].ranks[0].text;
  std::printf(
      "sieve-bench --train fsdp2: %s, %.1f M parameters, %.1f %% kept; %d nodes, network namespaces on a %s "
      "switch; PyTorch %s, FSDP2 on Gloo, %d steps\n",
      o.train_model.c_str(), number(head, "parameters") / 1e6, 100 * number(head, "density"), o.nodes,
      o.rate.empty() ? "unshaped" : o.rate.c_str(), string_of(head, "torch").c_str(), o.steps);
  std::printf("%-16s %4s %10s %14s %8s %8s %12s\n", "mode", "step", "loss bits", "loss", "step s", "comm s",
              "wire MB/node");
  for (const ModeRun& run : runs) {
    const RankResult& r0 = run.ranks[0];
    const std::vector<double> wire = wire_per_node(run);
    for (size_t s = 0; s < r0.losses.size(); ++s) {
      std::printf("%-16s %4zu   %08x %14.9g %8.3f %8.3f %12.2f\n", run.mode.c_str(), s,
                  static_cast<uint32_t>(r0.losses[s]), loss_value(r0.losses[s]), r0.seconds[s], r0.comm[s],
                  wire[s] / 1e6);
    }
  }
}

// FSDP2 against Sieve (and, past 2 ranks, against FSDP2's own variants): losses, parameters, wire
// bytes, step times. The exit status: 1 when a run failed or, at 2 ranks, the losses differ.
int print_comparison(const Options& o, const std::vector<ModeRun>& runs, bool failed) {
  const std::string& head = runs[0].ranks[0].text;
  int status = failed ? 1 : 0;
  const ModeRun& base = runs[0];
  const ModeRun& sieve = runs[1];
  bool identical = true;
  for (size_t i = 0; i < base.ranks.size(); ++i) identical = identical && base.ranks[i].losses == sieve.ranks[i].losses;
  const std::vector<double> wire_base = wire_per_node(base), wire_sieve = wire_per_node(sieve);
  double sum_base = 0, sum_sieve = 0;
  for (double w : wire_base) sum_base += w;
  for (double w : wire_sieve) sum_sieve += w;
  const std::string& sieve_text = sieve.ranks[0].text;
  const double sent = number(sieve_text, "elements_sent"), dense = number(sieve_text, "elements_dense");
  std::printf("sieve vs fsdp2: losses %s on every rank, parameters %s; largest loss difference %.3g\n",
              identical ? "bit-identical" : "DIFFERENT", same_digests(base, sieve) ? "bit-identical" : "different",
              largest_difference(base, sieve));
  for (size_t m = 2; m < runs.size(); ++m) {
    const bool regrouped = runs[m].mode == "fsdp2-regrouped";
    // Sharded on dim 1 a rank holds other elements, so only the losses compare.
    const char* parameters = !regrouped                    ? "not comparable (other shards)"
                             : same_digests(base, runs[m]) ? "bit-identical"
                                                           : "different";
    std::printf("%s vs fsdp2 (FSDP2's own, %s): largest loss difference %.3g, parameters %s\n", runs[m].mode.c_str(),
                regrouped ? "another grouping" : "parameters sharded on dim 1", largest_difference(base, runs[m]),
                parameters);
  }
  std::printf(
      "wire: sieve %.3f of fsdp2's bytes; the compacted groups' collectives send %.3f of theirs (kept "
      "elements, padding to the largest rank's segment, one flag per rank); parameters kept %.3f\n",
      sum_base > 0 ? sum_sieve / sum_base : 0, dense > 0 ? sent / dense : 0, number(head, "density"));
  std::printf("median step: fsdp2 %.3f s (comm %.3f s), sieve %.3f s (comm %.3f s)\n", median(base.ranks[0].seconds),
              median(base.ranks[0].comm), median(sieve.ranks[0].seconds), median(sieve.ranks[0].comm));
  if (o.nodes == 2 && !identical) status = 1;  // at 2 ranks the sum of two is the same in any order
  return status;
}

void numbers_value(tools::JsonWriter& json, const std::vector<double>& values) {
  json.begin_array();
  for (double v : values) json.value(v);
  json.end_array();
}

void numbers_member(tools::JsonWriter& json, const std::string& name, const std::vector<double>& values) {
  json.key(name);
  numbers_value(json, values);
}

// --json: the table's figures as one object (as --train ddp writes its own), every rank's losses
// included; the exit status is print_comparison's.
int print_json(const Options& o, const std::vector<ModeRun>& runs, bool failed) {
  const std::string& head = runs[0].ranks[0].text;
  std::ostringstream out;
  tools::JsonWriter json(out);
  json.begin_object();
  json.member("train", "fsdp2");
  json.member("model", o.train_model);
  json.member("parameters", number(head, "parameters"));
  json.member("density", number(head, "density"));
  json.member("nodes", o.nodes);
  json.member("rate", o.rate.empty() ? "unshaped" : o.rate);
  json.member("torch", string_of(head, "torch"));
  json.member("steps", o.steps);
  json.key("modes");
  json.begin_array();
  bool identical = true;
  for (const ModeRun& run : runs) {
    json.begin_object();
    json.member("name", run.mode);
    json.key("losses");  // per rank, per step, as float values; losses_bits: their bits
    json.begin_array();
    for (const RankResult& r : run.ranks) {
      std::vector<double> values;
      for (double bits : r.losses) values.push_back(loss_value(bits));
      numbers_value(json, values);
    }
    json.end_array();
    numbers_member(json, "losses_bits_rank0", run.ranks[0].losses);
    numbers_member(json, "step_seconds", run.ranks[0].seconds);
    numbers_member(json, "comm_seconds", run.ranks[0].comm);
    numbers_member(json, "wire_bytes_per_node", wire_per_node(run));
    if (&run != &runs[0]) {
      bool same = true;
      for (size_t i = 0; i < runs[0].ranks.size(); ++i) same = same && runs[0].ranks[i].losses == run.ranks[i].losses;
      if (&run == &runs[1]) identical = same;
      json.member("losses_identical_to_fsdp2", same);
      json.member("parameters_identical_to_fsdp2", same_digests(runs[0], run));
      json.member("largest_loss_difference", largest_difference(runs[0], run));
    }
    json.end_object();
  }
  json.end_array();
  json.member("failed", failed);
  json.end_object();
  std::printf("%s\n", out.str().c_str());
  return failed || (o.nodes == 2 && !identical) ? 1 : 0;
}

}  // namespace

int run_train_fsdp2(const Options& o) {
  const tools::InstallLayout layout = tools::InstallLayout::current();
  std::string script, netlab, python;
  if (const int status = check_train_setup(o, layout, &script, &netlab, &python)) return status;
  const int budget = o.timeout_s > 0 ? o.timeout_s : 1800;
  const auto deadline = Clock::now() + std::chrono::seconds(budget);
  Lab lab(netlab, "sf" + std::to_string(getpid()), layout.impairer());
  if (!lab.up(o, o.nodes)) {
    std::fprintf(stderr, "sieve-bench: could not bring up the namespace lab (its reason is above)\n");
    return 2;
  }
  std::vector<std::string> modes = {"fsdp2", "sieve"};
  // At more than 2 ranks FSDP2's own result under other configurations: the reduction-order noise.
  if (o.nodes > 2) {
    modes.push_back("fsdp2-regrouped");
    modes.push_back("fsdp2-shard1");
  }
  std::vector<ModeRun> runs;
  bool failed = false;
  for (size_t m = 0; m < modes.size(); ++m) {
    if (!o.quiet) std::fprintf(stderr, "sieve-bench: --train fsdp2: %s on %d nodes...\n", modes[m].c_str(), o.nodes);
    ModeRun run;
    run_ranks(o, lab, python, script, modes[m], 29531 + static_cast<int>(m), deadline, &run);
    if (!run.error.empty()) {
      std::fprintf(stderr, "sieve-bench: FAILED: %s: %s\n", modes[m].c_str(), run.error.c_str());
      if (m < 2 || tools::stop_signal()) return 1;  // without both FSDP2 and Sieve there is nothing to compare
      failed = true;
      continue;
    }
    runs.push_back(run);
  }
  if (o.json) return print_json(o, runs, failed);
  print_steps(o, runs);
  return print_comparison(o, runs, failed);
}

}  // namespace sieve::bench
