// SPDX-License-Identifier: Apache-2.0
// Child processes for tests and tools: spawned with a piped stdin/stdout, read line by line with a
// deadline, waited for with a deadline, and always killed and reaped by the destructor so no caller
// can leave a process behind or hang on one. Reads and waits also give up once the tool received a
// stop signal (tools/common/stop_signal.h), so a tool interrupted mid-wait unwinds at once.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>

#include <memory>
#include <string>
#include <vector>

namespace sieve::tools {

// Milliseconds on CLOCK_MONOTONIC (comparable across processes on one machine).
int64_t monotonic_ms();

class Child {
 public:
  // argv[0] is looked up in PATH; `env` entries "NAME=value" override the inherited environment.
  static std::unique_ptr<Child> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                      std::string* error);
  ~Child();  // SIGKILL and reap if still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Next stdout line (without '\n'); false on EOF or when timeout_ms passes first.
  bool read_line(std::string* line, int timeout_ms);
  // Reads lines until one starts with any of `prefixes`; false on EOF or timeout.
  bool expect_line(const std::vector<std::string>& prefixes, std::string* line, int timeout_ms);
  // True once the child closed its stdout (usually: it exited).
  bool stdout_closed() const { return stdout_closed_; }
  void close_stdin();
  void kill_now();
  // True when the child exited within timeout_ms; *status gets the exit code, or 128+signal.
  bool wait_exit(int* status, int timeout_ms);
  // CPU the child used (user + system), valid once wait_exit returned true.
  const rusage& usage() const { return usage_; }
  // Writes to the child's stdin; false once it closed.
  bool write_stdin(const std::string& text);
  // Every stdout line read so far, for failure messages.
  const std::string& transcript() const { return transcript_; }

 private:
  Child() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  bool stdout_closed_ = false;
  rusage usage_{};
  std::string pending_;
  std::string transcript_;
};

}  // namespace sieve::tools
