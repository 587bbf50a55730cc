// SPDX-License-Identifier: Apache-2.0
// Every copy of the library the dynamic loader could find, and the one it takes for a load by name:
// NCCL_NET_PLUGIN=sieve (NCCL dlopens libnccl-net-sieve.so) and LD_PRELOAD=libnccl-net-sieve.so both
// search LD_LIBRARY_PATH, then ldconfig's cache, then the default directories. With the Debian
// package and a `cmake --install` to /usr/local on one machine, that copy need not be the one
// sieve-info inspects, nor the one another tool or NCCL_NET_PLUGIN=<path> names.
#pragma once

#include <string>
#include <vector>

namespace sieve::info {

struct LibraryCopy {
  std::string path;      // as found (LD_LIBRARY_PATH's spelling, the cache's, a default directory)
  std::string found_by;  // "LD_LIBRARY_PATH", "ld.so cache", "default directory"
};

struct CopiesReport {
  std::string name;                 // libnccl-net-sieve.so
  std::vector<LibraryCopy> copies;  // in the loader's search order, each file once
  std::string by_name;              // the file a load by name maps ("" when none: by_name_error)
  std::string by_name_error;
};

// `multiarch` is the Debian triplet of the default directories ("x86_64-linux-gnu"; "" for none).
CopiesReport find_library_copies(const std::string& name, const std::string& multiarch);

// Whether two paths name the same file (the same device and inode); false when either is missing.
bool same_file(const std::string& a, const std::string& b);

}  // namespace sieve::info
