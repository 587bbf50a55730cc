// SPDX-License-Identifier: Apache-2.0
#include "tests/plugin/net/conformance/harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tools/nccl_emulator/plugin_loader.h"

extern char** environ;

namespace sieve::conformance {

std::vector<ListeningSocket> listening_sockets(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      char target[256];
      const ssize_t n = readlink((fd_dir + "/" + entry->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      if (strncmp(target, "socket:[", 8) == 0) inodes.insert(std::string(target + 8, strlen(target) - 9));
    }
    closedir(dir);
  }
  std::vector<ListeningSocket> found;
  for (const int family : {AF_INET, AF_INET6}) {
    std::ifstream table("/proc/" + std::to_string(pid) + (family == AF_INET ? "/net/tcp" : "/net/tcp6"));
    std::string line;
    std::getline(table, line);  // header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;
      const size_t colon = local.find(':');
      ListeningSocket socket_info;
      socket_info.family = family;
      socket_info.port = static_cast<int>(strtol(local.substr(colon + 1).c_str(), nullptr, 16));
      char text[INET6_ADDRSTRLEN] = {};
      if (family == AF_INET) {
        in_addr address{static_cast<uint32_t>(strtoul(local.substr(0, 8).c_str(), nullptr, 16))};
        inet_ntop(AF_INET, &address, text, sizeof text);
      } else {
        in6_addr address{};
        for (int word = 0; word < 4; ++word) {
          const uint32_t value = static_cast<uint32_t>(strtoul(local.substr(word * 8, 8).c_str(), nullptr, 16));
          memcpy(reinterpret_cast<char*>(&address) + 4 * word, &value, 4);
        }
        inet_ntop(AF_INET6, &address, text, sizeof text);
      }
      socket_info.address = text;
      found.push_back(socket_info);
    }
  }
  return found;
}

int open_tcp_client(const std::string& ns, const std::string& host, int port, std::string* error) {
  int fd = -1;
  // setns moves only the calling thread, so a short-lived thread enters the namespace; the socket
  // it creates keeps working from any thread afterwards.
  std::thread opener([&] {
    if (!ns.empty()) {
      const int ns_fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
      if (ns_fd < 0 || setns(ns_fd, CLONE_NEWNET) != 0) {
        *error = "enter namespace " + ns + ": " + strerror(errno);
        if (ns_fd >= 0) close(ns_fd);
        return;
      }
      close(ns_fd);
    }
    sockaddr_storage storage{};
    socklen_t length = 0;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      length = sizeof *v4;
    } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      length = sizeof *v6;
    } else {
      *error = "bad address " + host;
      return;
    }
    const int s = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
      *error = "connect " + host + ":" + std::to_string(port) + ": " + strerror(errno);
      if (s >= 0) close(s);
      return;
    }
    fd = s;
  });
  opener.join();
  return fd;
}

}  // namespace sieve::conformance
