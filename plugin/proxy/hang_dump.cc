#include "plugin/proxy/hang_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

#include "net/own_file.h"

namespace sieve::plugin::proxy {
namespace {

int g_pipe_write = -1;
struct sigaction g_previous {};

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

}  // namespace

bool install_dump_signal(int signo, std::function<void()> dump, std::string* why) {
  static std::once_flag once;
  bool installed = false;
  std::call_once(once, [&] {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      *why = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    // The reader blocks; only the writer, in the handler, must never block.
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);
    g_pipe_write = fds[1];
    std::thread([fd = fds[0], dump = std::move(dump)] {
      char buffer[64];
      for (;;) {
        const ssize_t n = read(fd, buffer, sizeof buffer);
        if (n > 0) dump();
        else if (n == 0 || errno != EINTR) return;
      }
    }).detach();
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(signo, &action, &g_previous) != 0) {
      *why = std::string("sigaction: ") + std::strerror(errno);
      return;
    }
    installed = true;
  });
  return installed;
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

bool append_report(const std::string& path, const std::string& report, std::string* why) {
  // The name is predictable and its directory may be shared: never through a symlink or into a
  // file that is not this user's own (net/own_file.h); readable by this user only.
  const int fd = net::open_own_file(path, O_WRONLY | O_APPEND, 0600, why);
  if (fd < 0) return false;
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
