// SPDX-License-Identifier: Apache-2.0
#include "plugin/proxy_probe.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <string>

namespace sieve::plugin {
namespace {

std::atomic<ProxyProbe> g_probe{nullptr};
std::atomic<const ProxyCommitApi*> g_commit_api{nullptr};

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void register_proxy_probe(ProxyProbe probe) { g_probe.store(probe); }

void register_proxy_commit_api(const ProxyCommitApi* api) { g_commit_api.store(api); }

const ProxyCommitApi* proxy_commit_api() { return g_commit_api.load(); }

void run_proxy_probe() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (ProxyProbe probe = g_probe.load()) probe();
  });
}

bool preloaded() {
  const char* list = getenv("LD_PRELOAD");
  Dl_info mine{};
  if (!list || !dladdr(reinterpret_cast<const void*>(&preloaded), &mine) || !mine.dli_fname) return false;
  const std::string self = real_path(mine.dli_fname);
  // ld.so separates LD_PRELOAD entries by spaces or colons.
  std::string entries(list);
  for (char& c : entries)
    if (c == ':') c = ' ';
  std::istringstream stream(entries);
  for (std::string item; stream >> item;)
    if (item.find('/') == std::string::npos ? item == base_name(self) : real_path(item) == self) return true;
  return false;
}

}  // namespace sieve::plugin
