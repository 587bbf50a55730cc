// SPDX-License-Identifier: Apache-2.0
#include "plugin/mapped_copies.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstring>

#include "net/log.h"

namespace sieve::plugin {

namespace {

struct Walk {
  std::string name, own_file;
  std::vector<std::string> paths;
  std::vector<std::pair<dev_t, ino_t>> files;
  const void* own_address = nullptr;
  size_t own = 0;
  bool own_found = false;
};

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool contains(const dl_phdr_info* info, const void* address) {
  const auto wanted = reinterpret_cast<uintptr_t>(address);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    if (h.p_type != PT_LOAD) continue;
    const uintptr_t start = info->dlpi_addr + h.p_vaddr;
    if (wanted >= start && wanted < start + h.p_memsz) return true;
  }
  return false;
}

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* walk = static_cast<Walk*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  const std::string path = info->dlpi_name;
  const bool own = contains(info, walk->own_address);
  const std::string base = basename_of(path);
  if (!own && base != walk->name && base != walk->own_file) return 0;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    for (const auto& f : walk->files)
      if (f.first == st.st_dev && f.second == st.st_ino) return 0;
    walk->files.emplace_back(st.st_dev, st.st_ino);
  }
  if (own) {
    walk->own = walk->paths.size();
    walk->own_found = true;
  }
  walk->paths.push_back(path);
  return 0;
}

}  // namespace

MappedCopies find_mapped_copies(const std::string& name) {
  Walk walk;
  walk.name = name;
  walk.own_address = reinterpret_cast<const void*>(&find_mapped_copies);
  Dl_info self{};
  if (::dladdr(walk.own_address, &self) != 0 && self.dli_fname != nullptr) walk.own_file = basename_of(self.dli_fname);
  ::dl_iterate_phdr(visit, &walk);
  MappedCopies copies;
  if (!walk.own_found) return copies;  // linked into an executable (a test, a tool): no copy of the library
  copies.paths = std::move(walk.paths);
  copies.own = walk.own;
  return copies;
}

std::string copies_warning(const MappedCopies& copies) {
  if (copies.paths.size() < 2 || copies.own + 1 != copies.paths.size()) return "";
  std::string list;
  for (size_t i = 0; i < copies.paths.size(); ++i) list += (i ? ", " : "") + copies.paths[i];
  return std::to_string(copies.paths.size()) + " copies of the library are mapped in this process (" + list +
         "): each has its own settings, masks and counters, so masks published to one never reach the proxy of "
         "another. Name one file in NCCL_NET_PLUGIN and LD_PRELOAD, or remove a copy (sieve-info lists them)";
}

void warn_about_other_copies() {
  const std::string warning = copies_warning(find_mapped_copies("libnccl-net-sieve.so"));
  if (!warning.empty()) SIEVE_WARN("%s", warning.c_str());
}

}  // namespace sieve::plugin
