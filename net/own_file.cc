// SPDX-License-Identifier: Apache-2.0
#include "net/own_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace sieve::net {

std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

int open_safe_directory(const std::string& dir, std::string* error) {
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(dir.empty() || dir[0] != '/' ? "." : "/", flags);
  std::string walked = dir.empty() || dir[0] != '/' ? "" : "/";
  size_t at = 0;
  while (fd >= 0 && at < dir.size()) {
    const size_t slash = dir.find('/', at);
    const std::string part = dir.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    at = slash == std::string::npos ? dir.size() : slash + 1;
    if (part.empty() || part == ".") continue;
    walked += (walked.empty() || walked.back() == '/' ? "" : "/") + part;
    const int next = ::openat(fd, part.c_str(), flags);
    const int saved = errno;
    ::close(fd);
    fd = next;
    if (fd < 0) {
      // O_NOFOLLOW on a symlink fails with ELOOP, or ENOTDIR together with O_DIRECTORY.
      struct stat st {};
      const bool link =
          saved == ELOOP || (saved == ENOTDIR && ::lstat(walked.c_str(), &st) == 0 && S_ISLNK(st.st_mode));
      if (error)
        *error = "its directory " + dir + " cannot be used: " +
                 (link ? walked + " is a symbolic link (files are never written through one)"
                       : std::string(std::strerror(saved)));
      return -1;
    }
  }
  if (fd < 0) {
    if (error) *error = "its directory " + dir + " cannot be used: " + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  std::string why;
  const uid_t me = ::geteuid();
  if (::fstat(fd, &st) != 0) why = std::strerror(errno);
  else if (st.st_uid != me && st.st_uid != 0)
    why = "it belongs to user " + std::to_string(st.st_uid) + ", who can rename files in it";
  else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    why = "other users can write to it and it is not sticky (chmod +t, as /tmp)";
  if (!why.empty()) {
    ::close(fd);
    if (error) *error = "its directory " + dir + " cannot be used: " + why;
    return -1;
  }
  return fd;
}

int open_own_file_at(int dir_fd, const std::string& name, const std::string& shown, int flags, mode_t mode,
                     std::string* error, bool* squatted) {
  if (squatted) *squatted = false;
  const int base = flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
  // Create first: O_EXCL fails on anything already there, a dangling symlink included.
  int fd = ::openat(dir_fd, name.c_str(), base | O_CREAT | O_EXCL, mode);
  if (fd >= 0) return fd;
  if (errno != EEXIST) {
    if (error) *error = "cannot create " + shown + ": " + std::strerror(errno);
    return -1;
  }
  // O_NONBLOCK: a FIFO planted at the name must not block the open.
  fd = ::openat(dir_fd, name.c_str(), base | O_NONBLOCK);
  if (fd < 0) {
    if (squatted) *squatted = errno == ELOOP || errno == EACCES || errno == ENXIO;
    if (error)
      *error = "cannot open " + shown + ": " +
               (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
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
    if (squatted) *squatted = true;
    if (error) *error = "refusing to write " + shown + ": " + why;
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int open_own_file(const std::string& path, int flags, mode_t mode, std::string* error, bool* squatted) {
  if (squatted) *squatted = false;
  const auto [dir, name] = split_path(path);
  const int dir_fd = open_safe_directory(dir, error);
  if (dir_fd < 0) {
    if (error) *error = "cannot write " + path + ": " + *error;
    return -1;
  }
  const int fd = open_own_file_at(dir_fd, name, path, flags, mode, error, squatted);
  ::close(dir_fd);
  return fd;
}

int create_unique_file_at(int dir_fd, const std::string& prefix, const std::string& suffix, mode_t mode,
                          std::string* name) {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 64; ++attempt) {
    unsigned char random[8];
    if (::getrandom(random, sizeof random, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof random)) {
      // No entropy yet (early boot): a name from the clock, still created with O_EXCL.
      const uint64_t mix = static_cast<uint64_t>(std::time(nullptr)) * 0x9e3779b97f4a7c15ull ^
                           static_cast<uint64_t>(::getpid()) << 20 ^ static_cast<uint64_t>(attempt);
      std::memcpy(random, &mix, sizeof random);
    }
    std::string candidate = prefix;
    for (unsigned char byte : random) candidate += kLetters[byte % (sizeof kLetters - 1)];
    candidate += suffix;
    const int fd = ::openat(dir_fd, candidate.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      *name = candidate;
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace sieve::net
