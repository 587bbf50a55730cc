// SPDX-License-Identifier: Apache-2.0
// Ctrl-C, SIGTERM and SIGHUP for the tools that build labs and start processes: the handlers only
// record the signal, and every long wait (tools/common/subprocess.h, the tools' own loops) gives up
// once one is recorded, so the tool unwinds through its destructors, which kill and reap its
// processes and remove its namespaces, and then exits with 128 + the signal.
#pragma once

#include <string>

namespace sieve::tools {

// Installs the handlers (no SA_RESTART: a blocked poll or wait returns at once).
void install_stop_handlers();
// The signal received since, or 0.
int stop_signal();
// "SIGINT", "SIGTERM", ... for a message.
std::string stop_signal_name();

}  // namespace sieve::tools
