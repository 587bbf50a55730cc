// SPDX-License-Identifier: Apache-2.0
// Placing helper threads on the CPUs next to the NIC they serve.
#pragma once

#include <pthread.h>

#include <string>
#include <vector>

namespace sieve::topology {

enum class PinChoice { kAuto, kOn, kOff };

// Auto pins only where placement matters: machines with more than one NUMA node.
bool should_pin(PinChoice choice, size_t numa_node_count);

// Restricts `thread` to `cpus`, minus those this process may not use (cgroups, taskset). Returns
// "" on success, else why not (nothing changes then); never aborts.
std::string pin_thread_to(pthread_t thread, const std::vector<int>& cpus);
inline std::string pin_current_thread_to(const std::vector<int>& cpus) { return pin_thread_to(pthread_self(), cpus); }

// The CPUs `thread` may run on now (empty on error).
std::vector<int> thread_cpus(pthread_t thread);

}  // namespace sieve::topology
