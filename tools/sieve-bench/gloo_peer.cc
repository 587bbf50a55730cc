// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/gloo_peer.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "tools/common/json_fields.h"
#include "tools/common/subprocess.h"

namespace sieve::bench {

namespace json_fields = tools::json_fields;

namespace {

struct Runner {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  bool eof = false;
  json_fields::Value report;  // the last JSON object line the rank printed (empty: none)
};

std::string joined(const std::vector<size_t>& sizes) {
  std::string text;
  for (size_t n : sizes) text += (text.empty() ? "" : ",") + std::to_string(n);
  return text;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// How the script ran FSDP's step: torch 1.13's Gloo cannot reduce-scatter, so it all-reduces.
std::string fsdp_note(const json_fields::Value& report, const ModeResult& result) {
  const std::string gathers = fixed(median(json_fields::numbers(report, "all_gather_seconds")), 3);
  const std::string step = fixed(result.median_seconds(), 3);
  if (json_fields::string(report, "reduce_scatter") == "reduce_scatter") {
    return "its all-gathers take " + gathers + " s of the " + step + " s step, its reduce-scatters the rest.";
  }
  return "Gloo in torch " + json_fields::string(report, "torch") +
         " has no reduce_scatter, so each group's gradients were all-reduced instead (twice a reduce-scatter's "
         "bytes); its all-gathers take " +
         gathers + " s of the " + step + " s step.";
}

}  // namespace

std::string gloo_python(const std::string& given) {
  if (!given.empty()) return given;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/python3";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "/usr/bin/python3";
}

bool gloo_supports(const std::string& script, DType dtype, std::string* error, const std::string& python) {
  if (access(python.c_str(), X_OK) != 0) return *error = python + " not found (pass --python PATH)", false;
  if (access(script.c_str(), R_OK) != 0) return *error = "Gloo script not found at " + script, false;
  auto probe = tools::Child::spawn({python, script, "--probe", "--dtype", dtype_label(dtype)}, {}, error);
  if (!probe) return false;
  std::string line, said;
  while (probe->read_line(&line, 60000)) said += line;
  int status = 0;
  if (!probe->wait_exit(&status, 5000)) return *error = "the Gloo probe did not finish", false;
  if (status == 0) return true;
  const size_t at = said.find("\"error\":\"");
  *error = at != std::string::npos ? said.substr(at + 9, said.find('"', at + 9) - (at + 9))
                                   : "the Gloo probe failed (status " + std::to_string(status) + "): " + said;
  return false;
}

namespace {

// In the forked child: rank `rank` of the Gloo script, in its namespace, its stdout into out_fd.
[[noreturn]] void exec_gloo_rank(const GlooJob& job, int rank, int out_fd, long seconds_left) {
  const bool fsdp = !job.shard_elements.empty();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm(static_cast<unsigned>(seconds_left));
  const std::string path = "/var/run/netns/" + job.namespaces[rank];
  const int ns = open(path.c_str(), O_RDONLY);
  if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(97);
  dup2(out_fd, STDOUT_FILENO);
  const std::vector<std::string> args = {job.python,
                                         job.script,
                                         "--rank",
                                         std::to_string(rank),
                                         "--world",
                                         std::to_string(job.nodes),
                                         "--master",
                                         job.master_address,
                                         "--ifname",
                                         job.ifname,
                                         fsdp ? "--shards" : "--buckets",
                                         joined(fsdp ? job.shard_elements : job.bucket_elements),
                                         "--dtype",
                                         dtype_label(job.dtype),
                                         "--iters",
                                         std::to_string(job.iterations),
                                         "--warmup",
                                         std::to_string(job.warmup),
                                         "--timeout",
                                         std::to_string(seconds_left)};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(job.python.c_str(), argv.data());
  _exit(98);
}

// Forks one runner per node; stops at the first that cannot start (result->error says why).
std::vector<Runner> start_runners(const GlooJob& job, long seconds_left, ModeResult* result) {
  std::vector<Runner> runners(job.nodes);
  for (int rank = 0; rank < job.nodes; ++rank) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      result->error = std::string("pipe: ") + std::strerror(errno);
      break;
    }
    const pid_t pid = fork();
    if (pid == 0) exec_gloo_rank(job, rank, pipe_fds[1], seconds_left);
    close(pipe_fds[1]);
    runners[rank] = {pid, pipe_fds[0], "", pid < 0};
    if (pid < 0) {
      close(pipe_fds[0]);
      result->error = std::string("fork: ") + std::strerror(errno);
    }
  }
  return runners;
}

// Reads every runner's output until all closed, or the deadline.
void read_runners(const GlooJob& job, std::vector<Runner>& runners, ModeResult* result) {
  while (result->error.empty()) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < runners.size(); ++i) {
      if (!runners[i].eof) {
        fds.push_back({runners[i].out, POLLIN, 0});
        which.push_back(i);
      }
    }
    if (fds.empty()) break;
    if (std::chrono::steady_clock::now() > job.deadline) {
      result->error = "Gloo run timed out";
      break;
    }
    if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t n = read(fds[k].fd, buffer, sizeof buffer);
      if (n <= 0) runners[which[k]].eof = true;
      else runners[which[k]].text.append(buffer, static_cast<size_t>(n));
    }
  }
}

// Reaps the runners (killed first after a failure), takes the first failed rank's error, and adds
// up what the kernel counted each rank sending.
void reap_runners(std::vector<Runner>& runners, ModeResult* result, double* tx_total, bool* all_tx) {
  for (size_t rank = 0; rank < runners.size(); ++rank) {
    Runner& r = runners[rank];
    json_fields::last_object_line(r.text, &r.report);
    if (r.pid > 0) {
      int status = 0;
      if (!result->error.empty()) kill(r.pid, SIGKILL);
      waitpid(r.pid, &status, 0);
      if (result->error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        const std::string said = json_fields::string(r.report, "error");
        result->error = !said.empty() ? said : "Gloo rank " + std::to_string(rank) + " failed (see its messages above)";
      }
    }
    if (r.out >= 0) close(r.out);
    double tx = 0;
    *all_tx = *all_tx && json_fields::number(r.report, "tx_bytes_per_allreduce", &tx);
    *tx_total += tx;
    if (rank == 0) result->seconds = json_fields::numbers(r.report, "seconds");
  }
}

}  // namespace

void run_gloo(const GlooJob& job, ModeResult* result) {
  if (access(job.python.c_str(), X_OK) != 0) {
    result->error = job.python + " not found (pass --python PATH)";
    return;
  }
  if (access(job.script.c_str(), R_OK) != 0) {
    result->error = "Gloo script not found at " + job.script;
    return;
  }
  const bool fsdp = !job.shard_elements.empty();
  const long seconds_left = std::max<long>(
      5, std::chrono::duration_cast<std::chrono::seconds>(job.deadline - std::chrono::steady_clock::now()).count());
  std::vector<Runner> runners = start_runners(job, seconds_left, result);
  read_runners(job, runners, result);
  double tx_total = 0;
  bool all_tx = true;
  reap_runners(runners, result, &tx_total, &all_tx);
  if (!result->error.empty()) return;
  if (result->seconds.empty()) {
    result->error = "the Gloo script reported no timings";
    return;
  }
  result->logical_bytes = 0;
  result->has_kernel = all_tx;
  result->kernel_tx_bytes = tx_total / static_cast<double>(runners.size());
  result->device = "gloo";
  if (fsdp) result->note = fsdp_note(runners[0].report, *result);
  result->ok = true;
}

}  // namespace sieve::bench
