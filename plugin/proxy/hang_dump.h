// SPDX-License-Identifier: Apache-2.0
// Hang forensics on demand: a signal (SIEVE_DUMP_SIGNAL, SIGUSR1 by default) makes the process log
// what the collective proxy knows about every communicator (Proxy::describe_state), without stopping
// anything. The handler only writes a byte to a pipe (all a signal handler may safely do); a helper
// thread, blocked on that pipe, builds and writes the report. A handler installed before Sieve's is
// still called afterwards, so a job's own use of the signal keeps working.
#pragma once

#include <functional>
#include <string>

namespace sieve::plugin::proxy {

// Installs the handler for `signo` once per process (later calls do nothing and return false);
// `dump` runs on the helper thread at each delivery. False, with *why, when it could not be set up.
bool install_dump_signal(int signo, std::function<void()> dump, std::string* why);

// In a process forked after install_dump_signal, starts the child's own helper thread (a no-op
// elsewhere, one atomic load): call it from a safe point, e.g. every interposed NCCL call. Until
// then the child's signals wait in its pipe.
void start_forked_dump_reader();

// Where a report also goes when SIEVE_STATS_FILE is set: a file in that file's directory (or in it,
// when it names a directory), "sieve-proxy-state.<host>.<pid>.txt"; "" when it is not set.
std::string dump_path(const std::string& stats_file);
// Appends `report` to `path` with a timestamp, in a file of this user's own (mode 0600, never
// through a symlink, in a directory reached through none that only this user or root can rename
// files in); false with *why when it could not. With `fallback`: when something not this user's own
// file holds the name (squatted in a shared directory), the report goes to a new file of a unique
// name beside it, *fallback names it for the next reports, and *note says so.
bool append_report(const std::string& path, const std::string& report, std::string* why = nullptr,
                   std::string* fallback = nullptr, std::string* note = nullptr);

}  // namespace sieve::plugin::proxy
