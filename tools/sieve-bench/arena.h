// SPDX-License-Identifier: Apache-2.0
// Element buffers aligned for the reduction loops and page-aligned for the transport.
#pragma once

#include <cstdlib>
#include <memory>

namespace sieve::bench {

struct Arena {
  explicit Arena(size_t bytes) : size(bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) == 0) data.reset(static_cast<char*>(p));
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;  // null when the allocation failed
  size_t size;
};

}  // namespace sieve::bench
