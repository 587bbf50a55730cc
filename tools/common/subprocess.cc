// SPDX-License-Identifier: Apache-2.0
#include "tools/common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "tools/common/stop_signal.h"

extern char** environ;

namespace sieve::tools {

int64_t monotonic_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}
namespace {
constexpr int64_t kStopCheckMs = 100;
}  // namespace

std::unique_ptr<Child> Child::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                    std::string* error) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    return nullptr;
  }
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    close(in_pipe[0]);
    close(in_pipe[1]);
    return nullptr;
  }
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& o : env) overridden |= o.compare(0, name.size() + 1, name + "=") == 0;
    if (!overridden) environment.push_back(entry);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const auto& e : environment) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, c_argv[0], &actions, nullptr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    *error = "spawn " + argv[0] + ": " + strerror(rc);
    close(in_pipe[1]);
    close(out_pipe[0]);
    return nullptr;
  }
  std::unique_ptr<Child> child(new Child());
  child->pid_ = pid;
  child->stdin_fd_ = in_pipe[1];
  child->stdout_fd_ = out_pipe[0];
  return child;
}

Child::~Child() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    wait4(pid_, &status, 0, &usage_);
  }
  close_stdin();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

bool Child::read_line(std::string* line, int timeout_ms) {
  const int64_t deadline = tools::monotonic_ms() + timeout_ms;
  while (true) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      *line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      transcript_ += *line + "\n";
      return true;
    }
    const int64_t left = deadline - tools::monotonic_ms();
    if (left <= 0 || stdout_fd_ < 0 || stop_signal()) return false;
    pollfd p{stdout_fd_, POLLIN, 0};
    // In slices, so a stop signal that arrives just before the poll still ends the wait soon.
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kStopCheckMs)));
    if ((ready < 0 && errno == EINTR) || ready == 0) continue;
    if (ready < 0) return false;
    char buffer[4096];
    const ssize_t n = read(stdout_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // EOF: the child closed stdout or died
      stdout_closed_ = true;
      return false;
    }
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

bool Child::expect_line(const std::vector<std::string>& prefixes, std::string* line, int timeout_ms) {
  const int64_t deadline = tools::monotonic_ms() + timeout_ms;
  while (true) {
    const int64_t left = deadline - tools::monotonic_ms();
    if (left <= 0 || !read_line(line, static_cast<int>(left))) return false;
    for (const auto& prefix : prefixes) {
      if (line->compare(0, prefix.size(), prefix) == 0) return true;
    }
  }
}

void Child::close_stdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void Child::kill_now() {
  if (!reaped_) kill(pid_, SIGKILL);
}

bool Child::wait_exit(int* status, int timeout_ms) {
  const int64_t deadline = tools::monotonic_ms() + timeout_ms;
  while (!reaped_) {
    int raw = 0;
    const pid_t done = wait4(pid_, &raw, WNOHANG, &usage_);
    if (done == pid_) {
      reaped_ = true;
      *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
      return true;
    }
    if (tools::monotonic_ms() > deadline || stop_signal()) return false;
    usleep(5000);
  }
  return true;
}

bool Child::write_stdin(const std::string& text) {
  if (stdin_fd_ < 0) return false;
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(stdin_fd_, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace sieve::tools
