// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-info/copies.h"

#include <dlfcn.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace sieve::info {

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// ldconfig -p: "\tlibnccl-net-sieve.so (libc6,x86-64) => /usr/local/lib/libnccl-net-sieve.so".
std::vector<std::string> cache_entries(const std::string& name) {
  std::vector<std::string> found;
  for (const char* ldconfig : {"/sbin/ldconfig", "/usr/sbin/ldconfig"}) {
    if (::access(ldconfig, X_OK) != 0) continue;
    FILE* pipe = ::popen((std::string(ldconfig) + " -p 2>/dev/null").c_str(), "r");
    if (pipe == nullptr) break;
    char line[4096];
    while (std::fgets(line, sizeof(line), pipe) != nullptr) {
      std::string text(line);
      const size_t start = text.find_first_not_of(" \t");
      const size_t arrow = text.find(" => ");
      if (start == std::string::npos || arrow == std::string::npos) continue;
      if (text.compare(start, name.size() + 1, name + " ") != 0) continue;
      std::string path = text.substr(arrow + 4);
      while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
      found.push_back(path);
    }
    ::pclose(pipe);
    break;
  }
  return found;
}

// The loader's own answer, from a child process so that nothing it maps stays in this one.
std::string load_by_name(const std::string& name, std::string* error) {
  int fds[2];
  if (::pipe(fds) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return "";
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return "";
  }
  if (child == 0) {
    ::close(fds[0]);
    std::string answer;
    void* handle = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL);
    link_map* map = nullptr;
    if (handle == nullptr) {
      const char* why = ::dlerror();
      answer = std::string("!") + (why != nullptr ? why : "dlopen failed");
    } else if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
      answer = map->l_name;
    } else {
      answer = "!the loader does not say which file it mapped";
    }
    ssize_t ignored = ::write(fds[1], answer.data(), answer.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string answer;
  char buffer[4096];
  pollfd p{fds[0], POLLIN, 0};
  while (::poll(&p, 1, 10000) > 0) {
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  ::kill(child, SIGKILL);  // done or stuck in a constructor: either way it is not needed any more
  ::waitpid(child, nullptr, 0);
  if (answer.empty()) {
    *error = "the loader gave no answer";
    return "";
  }
  if (answer[0] == '!') {
    *error = answer.substr(1);
    return "";
  }
  return answer;
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

CopiesReport find_library_copies(const std::string& name, const std::string& multiarch) {
  CopiesReport report;
  report.name = name;
  auto add = [&](const std::string& path, const char* found_by) {
    if (!is_file(path)) return;
    for (const auto& c : report.copies)
      if (same_file(c.path, path)) return;
    report.copies.push_back({path, found_by});
  };
  // LD_LIBRARY_PATH: ':' or ';' separated; an empty entry is the current directory.
  if (const char* value = std::getenv("LD_LIBRARY_PATH")) {
    std::string dirs(value);
    size_t at = 0;
    while (at <= dirs.size()) {
      size_t end = dirs.find_first_of(":;", at);
      if (end == std::string::npos) end = dirs.size();
      const std::string dir = dirs.substr(at, end - at);
      add((dir.empty() ? "." : dir) + "/" + name, "LD_LIBRARY_PATH");
      at = end + 1;
    }
  }
  for (const auto& path : cache_entries(name)) add(path, "ld.so cache");
  std::vector<std::string> defaults;
  if (!multiarch.empty()) defaults = {"/lib/" + multiarch, "/usr/lib/" + multiarch};
  for (const char* dir : {"/lib", "/usr/lib", "/lib64", "/usr/lib64"}) defaults.push_back(dir);
  for (const auto& dir : defaults) add(dir + "/" + name, "default directory");
  report.by_name = load_by_name(name, &report.by_name_error);
  return report;
}

}  // namespace sieve::info
