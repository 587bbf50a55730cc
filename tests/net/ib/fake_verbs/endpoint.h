// SPDX-License-Identifier: Apache-2.0
// Where device endpoints listen: abstract unix sockets by default (they vanish with their process,
// but belong to one network namespace), or socket files under FAKE_VERBS_SOCKET_DIR, which processes
// in different network namespaces (emulated nodes) can reach as long as they share the directory.
#pragma once

#include <string>

namespace sieve::fake_verbs {

// A non-blocking listening socket named `name`; -1 with errno (EADDRINUSE: a live process has it).
// A socket file left by a dead process is replaced.
int listen_endpoint(const std::string& name);

// 0 once connected (*fd set, non-blocking), EAGAIN while the listener's backlog is full, else the
// errno that says nobody listens there (a dead peer).
int connect_endpoint(const std::string& name, int* fd);

// Large socket buffers, so a big write moves in few turns of the service thread.
void tune_endpoint_socket(int fd);

}  // namespace sieve::fake_verbs
