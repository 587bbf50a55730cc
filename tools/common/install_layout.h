// Where a tool finds what ships with it: installed (bin/ beside lib/ and share/sieve/, as
// `cmake --install` and the Debian package lay it out) or in the build tree it was built in.
#pragma once

#include <string>

namespace sieve::tools {

// The directory of the running executable ("" when /proc/self/exe cannot be read).
std::string executable_dir();
// libnccl-net-sieve.so beside the executable, in ../lib (installed), or in the build tree's plugin/;
// build_tree_fallback (a compile-time path, or "") when none of them exists.
std::string default_plugin_path(const std::string& build_tree_fallback);
// A script installed in ../share/sieve/NAME, else source_tree_path (the copy in the source tree).
std::string default_script_path(const std::string& name, const std::string& source_tree_path);

}  // namespace sieve::tools
