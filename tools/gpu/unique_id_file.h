// SPDX-License-Identifier: Apache-2.0
// The NCCL unique id of a multi-process job on one machine, handed from rank 0 to the others through
// a file (no MPI, no torch store): rank 0 writes it under a temporary name and renames it into place,
// so a reader never sees half an id; the others poll for it until a deadline.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace sieve::tools::gpu {

// Rank 0 creates the id and publishes it at `path`; other ranks read it, waiting up to timeout_s.
// Returns "" on success, else why it failed.
inline std::string exchange_unique_id(int rank, const std::string& path, int timeout_s, ncclUniqueId* id) {
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) return std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id->internal, sizeof id->internal);
      if (!out) return "cannot write " + tmp;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return "cannot rename " + tmp + " to " + path;
    return "";
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id->internal, sizeof id->internal)) return "";
    if (std::chrono::steady_clock::now() > deadline)
      return "rank 0 never wrote " + path + " (waited " + std::to_string(timeout_s) + " s)";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace sieve::tools::gpu
