// SPDX-License-Identifier: Apache-2.0
#include "net/own_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sieve::net {

int open_own_file(const std::string& path, int flags, mode_t mode, std::string* error) {
  const int base = flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
  // Create first: O_EXCL fails on anything already there, a dangling symlink included.
  int fd = ::open(path.c_str(), base | O_CREAT | O_EXCL, mode);
  if (fd >= 0) return fd;
  if (errno != EEXIST) {
    if (error) *error = "cannot create " + path + ": " + std::strerror(errno);
    return -1;
  }
  // O_NONBLOCK: a FIFO planted at the name must not block the open.
  fd = ::open(path.c_str(), base | O_NONBLOCK);
  if (fd < 0) {
    if (error)
      *error =
          "cannot open " + path + ": " + (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
    return -1;
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_uid != ::geteuid()) why = "it belongs to user " + std::to_string(st.st_uid) + ", not this one";
  else if (st.st_nlink != 1) why = "it has " + std::to_string(st.st_nlink) + " links";
  if (!why.empty()) {
    ::close(fd);
    if (error) *error = "refusing to write " + path + ": " + why;
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace sieve::net
