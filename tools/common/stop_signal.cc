// SPDX-License-Identifier: Apache-2.0
#include "tools/common/stop_signal.h"

#include <signal.h>

#include <cstring>
#include <string>

namespace sieve::tools {
namespace {

// Written by the handler, read by the waits: a handler can reach nothing but a global.
volatile sig_atomic_t g_signal = 0;

void record(int signal) { g_signal = signal; }

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = record;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaction(signal, &action, nullptr);
}

int stop_signal() { return g_signal; }

std::string stop_signal_name() {
  const int signal = g_signal;
  if (signal == 0) return "";
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

}  // namespace sieve::tools
