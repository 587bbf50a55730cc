// SPDX-License-Identifier: Apache-2.0
#include "tools/common/install_layout.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

// Relative paths from the installed bin/ to the library and script directories (CMake computes them
// from GNUInstallDirs, tools/common/CMakeLists.txt). Relative on purpose: no path of the build machine.
#ifndef SIEVE_BIN_TO_LIBDIR
#error "SIEVE_BIN_TO_LIBDIR must be the library directory relative to the binary directory"
#endif
#ifndef SIEVE_INSTALL_LIBDIR
#error "SIEVE_INSTALL_LIBDIR must be the library directory relative to the prefix"
#endif
#ifndef SIEVE_BIN_TO_DATADIR
#error "SIEVE_BIN_TO_DATADIR must be share/sieve relative to the binary directory"
#endif

namespace sieve::tools {
namespace {

constexpr const char* kLibrary = "libnccl-net-sieve.so";

bool readable(const std::string& path) { return !path.empty() && access(path.c_str(), R_OK) == 0; }

// "/usr/bin/../lib/x" -> "/usr/lib/x": how a missing installed file is named to the user.
std::string normal(const std::string& path) { return std::filesystem::path(path).lexically_normal().string(); }

std::string canonical(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  const std::string found = real ? real : path;
  free(real);
  return found;
}

// The value of `key` (KEY:TYPE=value) in a CMakeCache.txt, "" when absent.
std::string cache_value(const std::string& cache, const std::string& key) {
  std::ifstream in(cache);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    const size_t equals = line.find('=');
    return equals == std::string::npos ? "" : line.substr(equals + 1);
  }
  return "";
}

}  // namespace

std::string executable_dir() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "";
  path[length] = '\0';
  const std::string text(path);
  return text.substr(0, text.rfind('/'));
}

std::string installed_libdir() { return SIEVE_INSTALL_LIBDIR; }

InstallLayout InstallLayout::current() { return InstallLayout(executable_dir()); }

InstallLayout::InstallLayout(const std::string& executable_dir) : executable_dir_(executable_dir) {
  if (executable_dir_.empty()) return;
  // A build tree: this project's CMakeCache.txt a few levels up (tools/sieve-bench/, tests/net/ib/, ...).
  std::string dir = executable_dir_;
  for (int level = 0; level < 5; ++level) {
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash == 0) break;
    dir = dir.substr(0, slash);
    const std::string cache = dir + "/CMakeCache.txt";
    if (!readable(cache) || cache_value(cache, "CMAKE_PROJECT_NAME") != "sieve") continue;
    build_dir_ = dir;
    source_dir_ = cache_value(cache, "CMAKE_HOME_DIRECTORY");
    break;
  }
}

std::string InstallLayout::plugin() const {
  const std::string installed = executable_dir_ + "/" SIEVE_BIN_TO_LIBDIR "/" + kLibrary;
  if (readable(installed)) return canonical(installed);
  const std::string built = build_dir_.empty() ? "" : build_dir_ + "/plugin/" + kLibrary;
  if (readable(built)) return built;
  return normal(installed);
}

std::string InstallLayout::script(const std::string& name) const {
  const std::string installed = executable_dir_ + "/" SIEVE_BIN_TO_DATADIR "/" + name;
  if (readable(installed)) return canonical(installed);
  const std::string in_source = source_dir_.empty() ? "" : source_dir_ + "/tools/share/" + name;
  if (readable(in_source)) return in_source;
  return normal(installed);
}

std::string InstallLayout::impairer() const {
  const std::string installed = executable_dir_ + "/sieve-impair";
  if (access(installed.c_str(), X_OK) == 0) return installed;
  const std::string built = build_dir_.empty() ? "" : build_dir_ + "/tools/sieve-impair/sieve-impair";
  if (!built.empty() && access(built.c_str(), X_OK) == 0) return built;
  return "";
}

}  // namespace sieve::tools
