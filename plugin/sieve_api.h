// The C++ side of the C API that the rest of plugin/ uses: the process's mask registry, which
// sieve_mask_publish() fills and the collective proxy reads.
#pragma once

#include "compress/mask_registry.h"

namespace sieve::plugin {

// Process-wide on purpose: the C API has no handle, and every communicator of the process must see
// what the trainer published.
compress::MaskRegistry& mask_registry();

}  // namespace sieve::plugin
