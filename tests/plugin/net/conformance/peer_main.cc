// SPDX-License-Identifier: Apache-2.0
// sieve_conformance_peer: one end of a two-process conformance test. The test (conformance_test.cc)
// starts a receiver, reads "HANDLE <hex>" from its stdout, starts a sender with --handle, and reads
// each side's verdict line ("OK ...", "FAIL ...", "ERROR <ms> ..."). The peer loads the plugin itself
// (dlopen after exec, as NCCL's proxy would in a fresh process) and never outlives its watchdog.
//
//   sieve_conformance_peer --plugin PATH --version 8..12 --role send|recv --scenario NAME
//                          [--handle HEX] [--seed N] [--watchdog-s N] [--pattern dense|sparse]
// Scenarios: matrix (0 B..64 MiB, 32 outstanding, byte-exact), impaired (0 B..16 MiB, byte-exact, then
// a "STATS" line of the plugin's sieve_stats_get counters), small, oversize (send 1 MiB into a
// 4 KiB receive), stream (64 MiB messages until an error: the killed-peer test), token (expects the
// connection to be refused), quickclose (small, and the receiver exits as soon as it closed its comm).
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plugin/sieve.h"
#include "tests/plugin/net/conformance/pattern.h"
#include "tests/plugin/net/conformance/peer_streams.h"
#include "tools/nccl_emulator/plugin_loader.h"

namespace {

using namespace sieve;
using namespace sieve::conformance;

void say(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vfprintf(stdout, fmt, args);
  va_end(args);
  fputc('\n', stdout);
  fflush(stdout);
}

struct Args {
  std::string plugin, role, scenario, handle;
  int version = 0;
  uint64_t seed = 1;
  int watchdog_s = 110;
  bool sparse = false;
};

bool parse_args(int argc, char** argv, Args* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--plugin") args->plugin = value;
    else if (key == "--version") args->version = atoi(value.c_str());
    else if (key == "--role") args->role = value;
    else if (key == "--scenario") args->scenario = value;
    else if (key == "--handle") args->handle = value;
    else if (key == "--seed") args->seed = strtoull(value.c_str(), nullptr, 10);
    else if (key == "--watchdog-s") args->watchdog_s = atoi(value.c_str());
    else if (key == "--pattern" && (value == "dense" || value == "sparse")) args->sparse = value == "sparse";
    else return false;
  }
  return !args->plugin.empty() && (args->role == "send" || args->role == "recv") && !args->scenario.empty() &&
         (args->role == "recv" || !args->handle.empty());
}

// The sender stays connected until the test closes its stdin, so a receiver's verdict is never an
// artefact of the sender going away early.
void wait_for_stdin_eof() {
  char buffer[256];
  while (read(STDIN_FILENO, buffer, sizeof buffer) > 0) {}
}

std::vector<size_t> matrix_ladder() {
  std::vector<size_t> sizes;
  for (int round = 0; round < 10; ++round) {
    for (int step = 0; step < kLadderSteps; ++step) sizes.push_back(kLadder[(step + round) % kLadderSteps]);
  }
  return sizes;  // 70 messages, every size at every window position
}

int fail(const std::string& why) {
  say("FAIL %s", why.c_str());
  return 1;
}

// The plugin's own traffic counters, read from the library NCCL's loader opened (never a second copy).
bool say_plugin_stats(const tools::NetPlugin& net) {
  void* library = dlopen(net.library().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!library) return false;
  using StatsGet = int (*)(sieve_stats_t*);
  auto get = reinterpret_cast<StatsGet>(dlsym(library, "sieve_stats_get"));
  sieve_stats_t stats{};
  stats.size = sizeof stats;
  const bool ok = get && get(&stats) == 0;
  if (ok) {
    say("STATS logical_sent %llu wire_sent %llu logical_received %llu wire_received %llu",
        static_cast<unsigned long long>(stats.bytes_logical_sent),
        static_cast<unsigned long long>(stats.bytes_wire_sent),
        static_cast<unsigned long long>(stats.bytes_logical_received),
        static_cast<unsigned long long>(stats.bytes_wire_received));
  }
  dlclose(library);
  return ok;
}

// 0 B to 16 MiB, odd sizes, each size at two window positions: about 43 MB, a few seconds on a lossy link.
std::vector<size_t> impaired_ladder() {
  const size_t sizes[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 4u << 20, 16u << 20};
  std::vector<size_t> ladder;
  for (int round = 0; round < 2; ++round) {
    for (size_t step = 0; step < 8; ++step) ladder.push_back(sizes[(step + round * 3) % 8]);
  }
  return ladder;
}

int run_transfer(const StreamEnd& end, const std::string& scenario) {
  if (scenario == "matrix") {
    StreamResult ladder = run_stream(end, matrix_ladder(), tools::kMaxRequests, 0, true);
    if (!ladder.ok) return fail("ladder: " + ladder.error);
    StreamResult large = run_stream(end, {kLargeSize, kLargeSize - 1, kLargeSize}, 2, 1000, true);
    if (!large.ok) return fail("64 MiB: " + large.error);
    say("OK %llu messages %llu bytes", static_cast<unsigned long long>(ladder.messages + large.messages),
        static_cast<unsigned long long>(ladder.bytes + large.bytes));
    return 0;
  }
  if (scenario == "impaired") {
    StreamResult got = run_stream(end, impaired_ladder(), 8, 0, true);
    if (!got.ok) return fail(got.error);
    if (!say_plugin_stats(*end.net)) return fail("sieve_stats_get not found in " + end.net->library());
    say("OK %llu messages %llu bytes", static_cast<unsigned long long>(got.messages),
        static_cast<unsigned long long>(got.bytes));
    return 0;
  }
  if (scenario == "small" || scenario == "token" || scenario == "quickclose") {
    StreamResult small = run_stream(end, {0, 1, 4096, (1u << 20) + 3, 0, 65537}, 4, 0, true);
    if (!small.ok) return fail(small.error);
    say("OK %llu messages", static_cast<unsigned long long>(small.messages));
    return 0;
  }
  if (scenario == "stream") {
    StreamResult stream = run_until_error(end, kLargeSize, 2, say);
    return stream.ok ? 0 : fail(stream.error);
  }
  if (scenario == "oversize") {
    const size_t sent = 1u << 20, posted = 4096;
    std::vector<unsigned char> buffer(sent + 4096, kCanary);
    void* mhandle = nullptr;
    int result = end.net->reg_mr(end.comm, buffer.data(), buffer.size(), tools::kPtrHost, &mhandle);
    if (result != tools::kNetSuccess) return fail(std::string("regMr: ") + tools::result_name(result));
    void* request = nullptr;
    int reported = -1;
    if (end.sender) {
      fill_pattern(buffer.data(), sent, end.seed, 0);
      result = tools::isend_until(*end.net, end.comm, buffer.data(), sent, 0, mhandle, &request, 10000);
      if (result == tools::kNetSuccess) result = tools::wait_until(*end.net, request, &reported, 10000);
      say("SENT %s", tools::result_name(result));
      end.net->dereg_mr(end.comm, mhandle);
      return 0;  // either outcome is fine on the sender; the receiver is the one under test
    }
    result = tools::irecv_until(*end.net, end.comm, buffer.data(), posted, 0, mhandle, &request, 10000);
    if (result == tools::kNetSuccess) result = tools::wait_until(*end.net, request, &reported, 10000);
    end.net->dereg_mr(end.comm, mhandle);
    for (size_t i = posted; i < buffer.size(); ++i) {
      if (buffer[i] != kCanary) return fail("overflow: byte " + std::to_string(i) + " past the 4096-byte receive");
    }
    if (result == tools::kNetSuccess)
      return fail("1 MiB send into a 4 KiB receive completed, size " + std::to_string(reported));
    if (result == tools::kTimedOut) return fail("no error within 10 s for a send larger than its receive");
    say("OK rejected %s", tools::result_name(result));
    return 0;
  }
  return fail("unknown scenario " + scenario);
}

int run_receiver(tools::NetPlugin& net, const Args& args) {
  tools::NetHandle handle;
  void* listen_comm = nullptr;
  int result = net.listen(0, &handle, &listen_comm);
  if (result != tools::kNetSuccess) return fail(std::string("listen: ") + tools::result_name(result));
  say("HANDLE %s", handle.to_hex().c_str());
  void* recv_comm = nullptr;
  const bool expect_refusal = args.scenario == "token";
  result = tools::accept_until(net, listen_comm, &recv_comm, expect_refusal ? 8000 : 60000);
  if (expect_refusal && !recv_comm) {
    say("OK refused: accept %s", tools::result_name(result));
    net.close_listen(listen_comm);
    return 0;
  }
  if (!recv_comm) return fail(std::string("accept: ") + tools::result_name(result));
  StreamEnd end{&net, recv_comm, false, args.seed, expect_refusal ? 6000 : 20000, args.sparse};
  int status = 0;
  if (expect_refusal) {
    StreamResult got = run_stream(end, {1u << 20}, 1, 0, true);
    status = got.ok ? fail("a peer with the wrong job token delivered a message") : 0;
    if (!got.ok) say("OK refused: accepted, then %s", got.error.c_str());
  } else {
    status = run_transfer(end, args.scenario);
  }
  net.close_recv(recv_comm);
  net.close_listen(listen_comm);
  // A receiver whose process ends the moment its comm is closed: the sender's messages all landed
  // and must complete as sent, whatever became of their acknowledgements.
  if (args.scenario == "quickclose") _exit(status);
  return status;
}

int run_sender(tools::NetPlugin& net, const Args& args) {
  tools::NetHandle handle;
  if (!tools::NetHandle::from_hex(args.handle, &handle)) return fail("bad --handle");
  void* send_comm = nullptr;
  const bool expect_refusal = args.scenario == "token";
  int result = tools::connect_until(net, 0, &handle, &send_comm, expect_refusal ? 8000 : 60000);
  if (!send_comm) {
    if (expect_refusal) {
      say("OK refused: connect %s", tools::result_name(result));
      wait_for_stdin_eof();
      return 0;
    }
    return fail(std::string("connect: ") + tools::result_name(result));
  }
  StreamEnd end{&net, send_comm, true, args.seed, expect_refusal ? 6000 : 20000, args.sparse};
  int status = 0;
  if (expect_refusal) {
    StreamResult sent = run_stream(end, {1u << 20}, 1, 0, true);
    say("OK connect completed; send %s", sent.ok ? "completed locally" : sent.error.c_str());
  } else {
    status = run_transfer(end, args.scenario);
  }
  wait_for_stdin_eof();
  net.close_send(send_comm);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, &args)) {
    fprintf(stderr,
            "usage: %s --plugin PATH --version 8..12 --role send|recv --scenario NAME [--handle HEX] "
            "[--seed N] [--watchdog-s N] [--pattern dense|sparse]\n",
            argv[0]);
    return 2;
  }
  alarm(static_cast<unsigned>(args.watchdog_s));  // SIGALRM kills a hung peer; the test sees no verdict
  std::string error;
  tools::LoaderOptions options;
  options.version = args.version;
  auto net = tools::NetPlugin::open(args.plugin, options, &error);
  if (!net) return fail(error);
  int result = net->init();
  if (result != tools::kNetSuccess) return fail(std::string("init: ") + tools::result_name(result));
  int ndev = 0;
  result = net->devices(&ndev);
  if (result != tools::kNetSuccess || ndev < 1) {
    return fail(std::string("devices: ") + tools::result_name(result) + ", " + std::to_string(ndev) + " devices");
  }
  const int status = args.role == "recv" ? run_receiver(*net, args) : run_sender(*net, args);
  result = net->finalize();
  if (result != tools::kNetSuccess && status == 0) return fail(std::string("finalize: ") + tools::result_name(result));
  return status;
}
