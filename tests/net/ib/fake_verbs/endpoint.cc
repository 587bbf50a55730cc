// SPDX-License-Identifier: Apache-2.0
#include "tests/net/ib/fake_verbs/endpoint.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace sieve::fake_verbs {
namespace {

constexpr int kSocketBuffer = 4 << 20;

// False (errno ENAMETOOLONG) when the path does not fit in sun_path.
bool address_of(const std::string& name, sockaddr_un* address, socklen_t* length, std::string* file) {
  *address = {};
  address->sun_family = AF_UNIX;
  const char* dir = std::getenv("FAKE_VERBS_SOCKET_DIR");
  if (dir == nullptr || *dir == '\0') {
    if (name.size() + 1 > sizeof(address->sun_path)) {
      errno = ENAMETOOLONG;
      return false;
    }
    std::memcpy(address->sun_path + 1, name.data(), name.size());  // leading NUL: abstract
    *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    file->clear();
    return true;
  }
  std::string flat = name;
  std::replace(flat.begin(), flat.end(), '/', '.');
  *file = std::string(dir) + "/" + flat;
  if (file->size() + 1 > sizeof(address->sun_path)) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memcpy(address->sun_path, file->c_str(), file->size() + 1);
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + file->size() + 1);
  return true;
}

}  // namespace

void tune_endpoint_socket(int fd) {
  int size = kSocketBuffer;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

int listen_endpoint(const std::string& name) {
  sockaddr_un address;
  socklen_t length;
  std::string file;
  if (!address_of(name, &address, &length, &file)) return -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    int error = errno;
    ::close(fd);
    if (error != EADDRINUSE || file.empty() || attempt > 0) {
      errno = error;
      return -1;
    }
    // A socket file: if nobody listens on it, its process died; take the name over.
    int probe = -1;
    if (connect_endpoint(name, &probe) == 0) {
      ::close(probe);
      errno = EADDRINUSE;
      return -1;
    }
    ::unlink(file.c_str());
  }
  errno = EADDRINUSE;
  return -1;
}

int connect_endpoint(const std::string& name, int* fd_out) {
  sockaddr_un address;
  socklen_t length;
  std::string file;
  if (!address_of(name, &address, &length, &file)) return errno;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  tune_endpoint_socket(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    int error = errno == EINPROGRESS ? EAGAIN : errno;
    ::close(fd);
    return error;
  }
  *fd_out = fd;
  return 0;
}

}  // namespace sieve::fake_verbs
