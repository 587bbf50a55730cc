// SPDX-License-Identifier: Apache-2.0
#include "plugin/stats.h"

namespace sieve::plugin {

ProcessStats& process_stats() {
  static ProcessStats stats;
  return stats;
}

}  // namespace sieve::plugin
