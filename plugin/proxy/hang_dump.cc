// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy/hang_dump.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <thread>

#include "net/own_file.h"

namespace sieve::plugin::proxy {
namespace {

int g_pipe_read = -1;
int g_pipe_write = -1;
struct sigaction g_previous {};
std::function<void()>* g_dump = nullptr;  // set once, never freed: a forked child needs it too
// A forked child's reader, wanted since the fork and started at its first safe point
// (start_forked_dump_reader): a thread cannot safely be started in the fork itself.
std::atomic<bool> g_reader_wanted{false};

void on_signal(int signo, siginfo_t* info, void* context) {
  const int saved = errno;
  const char byte = 1;
  if (g_pipe_write >= 0) (void)!write(g_pipe_write, &byte, 1);  // a full pipe: a report is already due
  errno = saved;
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(signo, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(signo);
  }
}

// The pipe: the handler writes without ever blocking (a full pipe drops the byte), the reader
// blocks. Only async-signal-safe calls, for the forked child. False when it could not be made.
bool open_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  const int flags = fcntl(fds[0], F_GETFL);
  if (flags < 0 || fcntl(fds[0], F_SETFL, flags & ~O_NONBLOCK) != 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  g_pipe_read = fds[0];
  g_pipe_write = fds[1];
  return true;
}

// The thread that reads the pipe and reports. False, with *why, when it could not be started.
bool start_reader(std::string* why) {
  try {
    std::thread([fd = g_pipe_read] {
      char buffer[64];
      for (;;) {
        const ssize_t n = read(fd, buffer, sizeof buffer);
        if (n > 0) (*g_dump)();
        else if (n == 0 || errno != EINTR) return;
      }
    }).detach();
  } catch (const std::exception& e) {
    *why = std::string("no helper thread: ") + e.what();
    return false;
  }
  return true;
}

// A forked child has the handler but not the helper thread (threads do not survive fork), and the
// parent's pipe, whose bytes would wake the parent's thread to report the parent's state. It gets a
// pipe of its own here, with async-signal-safe calls only (all POSIX allows in the child of a
// multi-threaded fork); its reader starts at its first safe point, and a signal before that is kept
// in the pipe until then. A child that never reaches one (a DataLoader worker) is not killed by the
// signal and reports nothing: it has no communicator of its own.
void after_fork_in_child() {
  if (g_pipe_write < 0) return;
  close(g_pipe_write);
  close(g_pipe_read);
  g_pipe_read = g_pipe_write = -1;
  if (open_pipe()) g_reader_wanted.store(true, std::memory_order_release);
}

}  // namespace

bool install_dump_signal(int signo, std::function<void()> dump, std::string* why) {
  static std::once_flag once;
  bool installed = false;
  std::call_once(once, [&] {
    g_dump = new std::function<void()>(std::move(dump));
    if (!open_pipe()) {
      *why = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    if (!start_reader(why)) {
      close(g_pipe_read);
      close(g_pipe_write);
      g_pipe_read = g_pipe_write = -1;
      return;
    }
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    // The job's own handler, if it has one already, is kept and called after ours.
    if (sigaction(signo, &action, &g_previous) != 0) {
      *why = std::string("sigaction: ") + std::strerror(errno);
      return;
    }
    installed = true;
  });
  return installed;
}

void start_forked_dump_reader() {
  if (!g_reader_wanted.load(std::memory_order_acquire) || !g_reader_wanted.exchange(false)) return;
  std::string why;
  if (!start_reader(&why)) g_reader_wanted.store(true);  // tried again at the next safe point
}

std::string dump_path(const std::string& stats_file) {
  if (stats_file.empty()) return "";
  struct stat st {};
  std::string dir;
  if (stat(stats_file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = stats_file;
  } else {
    const size_t slash = stats_file.rfind('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : stats_file.substr(0, slash);
  }
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "sieve-proxy-state." + host + "." + std::to_string(getpid()) + ".txt";
}

bool append_report(const std::string& path, const std::string& report, std::string* why, std::string* fallback,
                   std::string* note) {
  // The name is predictable and its directory may be shared: never under a symlinked or foreign
  // directory, never through a symlink or into a file that is not this user's own (net/own_file.h);
  // readable by this user only. A name another user took first is left to them: the report goes to
  // a name of its own beside it, which later reports reuse (*fallback).
  const auto [dir, name] = net::split_path(path);
  std::string problem;
  const int dir_fd = net::open_safe_directory(dir, &problem);
  if (dir_fd < 0) {
    if (why) *why = "cannot write " + path + ": " + problem;
    return false;
  }
  int fd = -1;
  if (fallback && !fallback->empty()) {
    fd = net::open_own_file_at(dir_fd, net::split_path(*fallback).second, *fallback, O_WRONLY | O_APPEND, 0600,
                               &problem);
  } else {
    bool squatted = false;
    fd = net::open_own_file_at(dir_fd, name, path, O_WRONLY | O_APPEND, 0600, &problem, &squatted);
    if (fd < 0 && squatted && fallback) {
      const size_t dot = name.rfind(".txt");
      std::string unique;
      fd = net::create_unique_file_at(dir_fd, (dot == std::string::npos ? name : name.substr(0, dot)) + ".", ".txt",
                                      0600, &unique);
      if (fd >= 0) {
        *fallback = (dir == "/" ? "/" : dir + "/") + unique;
        if (note) *note = problem + "; this process's reports go to " + *fallback + " instead";
      }
    }
  }
  ::close(dir_fd);
  if (fd < 0) {
    if (why) *why = problem;
    return false;
  }
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string line = std::string(stamp) + " " + report + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != line.size() && why) *why = "cannot write " + path + ": " + std::strerror(errno);
  return done == line.size();
}

}  // namespace sieve::plugin::proxy
