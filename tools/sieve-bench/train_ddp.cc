// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/train_ddp.h"

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
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "tools/common/install_layout.h"
#include "tools/common/netlab.h"
#include "tools/common/stop_signal.h"
#include "tools/common/subprocess.h"
#include "tools/sieve-bench/gloo_peer.h"

namespace sieve::bench {

namespace {

using Clock = std::chrono::steady_clock;

// ddp_train.py's modes when --train-modes leaves them to it.
constexpr int kDefaultModes = 6;
// ResNet-18's 11.7 M fp32 gradients: what a dense step all-reduces.
constexpr double kResnet18Bytes = 11.69e6 * 4;

int mode_count(const Options& o) {
  if (o.train_modes.empty()) return kDefaultModes;
  return 1 + static_cast<int>(std::count(o.train_modes.begin(), o.train_modes.end(), ','));
}

// Whether `python` can run the script (PyTorch with Gloo, torchvision, Sieve's package): the
// script's own --probe, seconds, before any lab exists.
bool probe(const std::string& python, const std::string& script, std::string* error) {
  if (access(script.c_str(), R_OK) != 0) return *error = "--train: the training script is not at " + script, false;
  auto child = tools::Child::spawn({python, script, "--probe"}, {}, error);
  if (!child) return *error = "--train: cannot start " + python + ": " + *error, false;
  std::string line, said;
  while (child->read_line(&line, 120000)) said += line;
  int status = 0;
  if (!child->wait_exit(&status, 5000)) return *error = "--train: the PyTorch probe did not finish", false;
  if (status == 0) return true;
  const size_t at = said.find("\"error\": \"");
  *error = "--train: " + (at != std::string::npos ? said.substr(at + 10, said.rfind('"') - (at + 10))
                                                  : python + " failed the probe (status " + std::to_string(status) +
                                                        ")" + (said.empty() ? "" : ": " + said));
  return false;
}

struct Rank {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  bool eof = false;
};

}  // namespace

int training_budget_seconds(const Options& o) {
  if (o.timeout_s > 0) return o.timeout_s;
  double rate = rate_bits_per_second(o.rate);
  if (rate <= 0) rate = 1e9;
  const double comm = 2.0 * (o.nodes - 1) / o.nodes * kResnet18Bytes * 8 / rate;
  // A rank's forward and backward at 32x32 on a shared core, the nodes sharing the machine's cores.
  const double compute = 1.0 * o.nodes;
  const double seconds = 180 + 3.0 * mode_count(o) * o.steps * (comm + compute);
  return static_cast<int>(std::min(86400.0, std::ceil(seconds)));
}

int run_ddp_training(const Options& o, std::string* output, std::string* failure) {
  const std::string why_not = tools::NetLab::unavailable_reason();
  if (!why_not.empty()) return *failure = "--train needs the namespace lab (" + why_not + ")", 2;
  const tools::InstallLayout layout = tools::InstallLayout::current();
  const std::string script = o.train_script.empty() ? layout.script("ddp_train.py") : o.train_script;
  const std::string python = gloo_python(o.python);  // --python, else python3 on PATH
  if (!probe(python, script, failure)) return 2;
  const int budget = training_budget_seconds(o);
  const auto deadline = Clock::now() + std::chrono::seconds(budget);

  const std::string netlab = o.netlab.empty() ? layout.script("netlab.sh") : o.netlab;
  tools::NetLab lab(o.nodes, o.rate.empty() ? "" : "--rate " + o.rate, netlab);
  if (!lab.ok()) return *failure = "could not bring up the namespace lab: " + lab.error(), 2;

  std::vector<Rank> ranks(o.nodes);
  for (int rank = 0; rank < o.nodes && failure->empty(); ++rank) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      *failure = std::string("pipe: ") + std::strerror(errno);
      break;
    }
    std::vector<std::string> args = {python,      script,
                                     "--rank",    std::to_string(rank),
                                     "--world",   std::to_string(o.nodes),
                                     "--master",  lab.addr(0),
                                     "--ifname",  tools::NetLab::ifname(),
                                     "--steps",   std::to_string(o.steps),
                                     "--density", std::to_string(o.prune.density),
                                     "--timeout", std::to_string(budget)};
    if (!o.train_modes.empty()) args.insert(args.end(), {"--modes", o.train_modes});
    if (o.json) args.push_back("--json");
    if (o.quiet) args.push_back("--quiet");
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(static_cast<unsigned>(budget));
      const std::string path = "/var/run/netns/" + lab.ns(rank);
      const int ns = open(path.c_str(), O_RDONLY);
      if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(97);
      dup2(pipe_fds[1], STDOUT_FILENO);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(python.c_str(), argv.data());
      _exit(98);
    }
    close(pipe_fds[1]);
    if (pid < 0) {
      close(pipe_fds[0]);
      *failure = std::string("fork: ") + std::strerror(errno);
      break;
    }
    ranks[rank] = {pid, pipe_fds[0], "", false};
  }
  // Every rank's output until all closed, the deadline, or a stop signal.
  while (failure->empty()) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i].eof && ranks[i].out >= 0) {
        fds.push_back({ranks[i].out, POLLIN, 0});
        which.push_back(i);
      }
    }
    if (fds.empty()) break;
    if (tools::stop_signal()) *failure = "interrupted by " + tools::stop_signal_name();
    else if (Clock::now() > deadline)
      *failure = "the training timed out after " + std::to_string(budget) + " s (--timeout S sets it)";
    if (!failure->empty()) break;
    if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[65536];
      const ssize_t n = read(fds[k].fd, buffer, sizeof buffer);
      if (n <= 0) ranks[which[k]].eof = true;
      else ranks[which[k]].text.append(buffer, static_cast<size_t>(n));
    }
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    Rank& r = ranks[rank];
    if (r.pid > 0) {
      if (!failure->empty()) kill(r.pid, SIGKILL);
      int status = 0;
      waitpid(r.pid, &status, 0);
      if (failure->empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        *failure = "training rank " + std::to_string(rank) +
                   (WIFSIGNALED(status) ? std::string(" was killed by signal ") + strsignal(WTERMSIG(status))
                                        : " exited with status " + std::to_string(WEXITSTATUS(status))) +
                   " (its messages are above)";
      }
    }
    if (r.out >= 0) close(r.out);
  }
  if (!failure->empty()) return tools::stop_signal() ? 128 + tools::stop_signal() : 1;
  if (ranks[0].text.empty()) return *failure = "training rank 0 wrote no report", 1;
  *output = ranks[0].text;
  return 0;
}

}  // namespace sieve::bench
