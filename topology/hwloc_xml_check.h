// SPDX-License-Identifier: Apache-2.0
// Checks an XML topology (SIEVE_TOPO_FILE) before hwloc 2.9 imports it: that import trusts its input
// and crashes on some malformed files, so a file must have the shape lstopo writes.
#pragma once

#include <string>

namespace sieve::topology {

// "" when `xml` has the shape hwloc's import survives, else why not (naming the file `name` and the
// byte where the problem is).
std::string check_hwloc_xml(const std::string& name, const std::string& xml);

}  // namespace sieve::topology
