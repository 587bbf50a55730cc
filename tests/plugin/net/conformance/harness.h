// SPDX-License-Identifier: Apache-2.0
// What the two-process conformance tests need besides tools::Child and tools::NetLab: the listening
// TCP sockets of a process (to aim stray clients at the plugin's listen port without knowing its
// handle layout), and plain TCP clients opened from inside a namespace.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "tools/common/netlab.h"
#include "tools/common/subprocess.h"

namespace sieve::conformance {

using tools::Child;
using tools::NetLab;

struct ListeningSocket {
  int family = 0;       // AF_INET or AF_INET6
  std::string address;  // numeric, as listened on ("0.0.0.0", "127.0.0.1", "::")
  int port = 0;
};

// TCP sockets in LISTEN state owned by `pid`, read from /proc (valid in the process's namespace).
std::vector<ListeningSocket> listening_sockets(pid_t pid);

// A plain TCP client connected to host:port from inside namespace `ns` ("" = this one); -1 on failure.
int open_tcp_client(const std::string& ns, const std::string& host, int port, std::string* error);

}  // namespace sieve::conformance
