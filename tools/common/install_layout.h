// SPDX-License-Identifier: Apache-2.0
// Where a tool finds what ships with it, from where its own executable lies, never from a path
// compiled into it (a build tree's path in an installed binary would make it run the build's copy
// once the installed one is gone, and makes the package differ by where it was built):
//   installed  PREFIX/bin/TOOL with the library in PREFIX/LIBDIR and the scripts in PREFIX/share/sieve,
//              as `cmake --install` and the Debian package lay them out;
//   build tree BUILD/tools/X/TOOL (or deeper) under a CMakeCache.txt of this project, with the library
//              in BUILD/plugin, sieve-impair in BUILD/tools/sieve-impair and the scripts in the source tree
//              the cache names.
// When neither holds the file, the installed location is what the tool reports as missing.
#pragma once

#include <string>

namespace sieve::tools {

// The directory of the running executable ("" when /proc/self/exe cannot be read).
std::string executable_dir();

// The library directory relative to the installation prefix ("lib/x86_64-linux-gnu"), for the
// tools' --help.
std::string installed_libdir();

// What ships with the tool in `executable_dir`, laid out as installed or as a build tree.
class InstallLayout {
 public:
  // The running executable's layout.
  static InstallLayout current();
  explicit InstallLayout(const std::string& executable_dir);

  // libnccl-net-sieve.so: the installed one, else the build tree's, else the installed path (missing).
  std::string plugin() const;
  // A script shipped in share/sieve (netlab.sh, gloo_allreduce.py): installed, else the source
  // tree's tools/share/NAME, else the installed path (missing).
  std::string script(const std::string& name) const;
  // sieve-impair: beside the tool when installed, else the build tree's; "" when neither exists
  // (netlab.sh then looks on PATH itself).
  std::string impairer() const;
  // The build tree the executable lies in ("" when it is not in one), and its source tree.
  const std::string& build_dir() const { return build_dir_; }
  const std::string& source_dir() const { return source_dir_; }

 private:
  std::string executable_dir_;
  std::string build_dir_, source_dir_;
};

}  // namespace sieve::tools
