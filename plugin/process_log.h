// SPDX-License-Identifier: Apache-2.0
// The library's log for this process, set up once by whichever face runs first (the net plugin's
// init, the collective proxy's first call): SIEVE_LOG_LEVEL for the stderr fallback, and one warning
// per configuration problem of the registry. NCCL initialises the plugin once per communicator and
// the proxy starts on its own; either way each problem is said once per process, through NCCL's
// logger when NCCL gave one by then (call after installing it), else on stderr. A second copy of the
// library mapped in the process is warned about here too (plugin/mapped_copies.h).
#pragma once

namespace sieve::plugin {

void start_process_log();

}  // namespace sieve::plugin
