// SPDX-License-Identifier: Apache-2.0
// The C++ side of the C API that the rest of plugin/ uses: the process's mask registry, which
// sieve_mask_publish() fills and the collective proxy reads.
#pragma once

#include <string>

#include "compress/mask_registry.h"

namespace sieve::plugin {

// Process-wide on purpose: the C API has no handle, and every communicator of the process must see
// what the trainer published.
compress::MaskRegistry& mask_registry();

// Sets the calling thread's sieve_last_error() to detail; returns code. For C API functions
// defined outside sieve_api.cc (compact_api.cc).
int record_failure(int code, const std::string& detail);

}  // namespace sieve::plugin
