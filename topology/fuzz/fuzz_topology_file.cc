// SPDX-License-Identifier: Apache-2.0
// Fuzzes what SIEVE_TOPO_FILE feeds: an XML topology read through hwloc into a Machine
// (topology/hwloc_reader.cc walks whatever tree hwloc builds from it). Seeds: the test fixtures.
// A refusal must say why; ASan/UBSan watch the walk over whatever hwloc accepted.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "topology/hwloc_reader.h"

using namespace sieve::topology;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("HWLOC_HIDE_ERRORS", "2", 1);  // hwloc's own complaints about bad XML, thousands of them
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxTopologyFileBytes) return 0;
  const std::string xml(reinterpret_cast<const char*>(data), size);
  Machine machine;
  std::string error;
  if (!read_with_hwloc_xml("fuzz.xml", xml, machine, error)) {
    if (error.empty()) std::abort();
    return 0;
  }
  if (machine.source != Source::kTopologyFile) std::abort();
  return 0;
}

// hwloc itself (the system's libhwloc, not Sieve) leaks objects on some XML error paths; Sieve's
// reader destroys every topology it creates. Leaks from inside libhwloc are not this target's.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhwloc.so\n"; }
