#include "tools/common/install_layout.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <initializer_list>

namespace sieve::tools {
namespace {

std::string first_existing(std::initializer_list<std::string> candidates) {
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), R_OK) != 0) continue;
    char* real = realpath(candidate.c_str(), nullptr);
    const std::string found = real ? real : candidate;
    free(real);
    return found;
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

std::string default_plugin_path(const std::string& build_tree_fallback) {
  const std::string dir = executable_dir();
  const std::string name = "libnccl-net-sieve.so";
  std::string found;
  if (!dir.empty())
    found = first_existing({dir + "/" + name, dir + "/../lib/" + name, dir + "/../../plugin/" + name});
  return found.empty() ? build_tree_fallback : found;
}

std::string default_script_path(const std::string& name, const std::string& source_tree_path) {
  const std::string dir = executable_dir();
  std::string found = dir.empty() ? "" : first_existing({dir + "/../share/sieve/" + name});
  return found.empty() ? source_tree_path : found;
}

}  // namespace sieve::tools
