// SPDX-License-Identifier: Apache-2.0
#include "topology/pinning.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "topology/machine.h"

namespace sieve::topology {

bool should_pin(PinChoice choice, size_t numa_node_count) {
  switch (choice) {
    case PinChoice::kOn: return true;
    case PinChoice::kOff: return false;
    case PinChoice::kAuto: return numa_node_count > 1;
  }
  return false;
}

std::vector<int> thread_cpus(pthread_t thread) {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(thread, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::string pin_thread_to(pthread_t thread, const std::vector<int>& cpus) {
  if (cpus.empty()) return "no CPUs to pin to";
  // The main thread's affinity stands for the process's (taskset, cgroup cpusets); the calling
  // thread's own may already be narrowed by an earlier pin.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) != 0)
    return std::string("sched_getaffinity failed: ") + std::strerror(errno);
  cpu_set_t wanted;
  CPU_ZERO(&wanted);
  int count = 0;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return "CPU " + std::to_string(cpu) + " is out of range";
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &wanted);
      ++count;
    }
  }
  if (count == 0) return "none of CPUs " + cpu_list_text(cpus) + " is allowed to this process";
  const int status = pthread_setaffinity_np(thread, sizeof(wanted), &wanted);
  if (status != 0) return "pthread_setaffinity_np(" + cpu_list_text(cpus) + ") failed: " + std::strerror(status);
  return "";
}

}  // namespace sieve::topology
