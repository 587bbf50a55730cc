// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-perf/perf_peer.h"

#include <sched.h>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

#include "tools/nccl_emulator/plugin_loader.h"

namespace sieve::perf {
namespace {

constexpr int kSetupTimeoutMs = 30000;
constexpr int kStallTimeoutMs = 20000;

int fail(const std::string& why) {
  printf("FAIL %s\n", why.c_str());
  fflush(stdout);
  return 1;
}

std::string failed(const char* what, int result) { return std::string(what) + ": " + tools::result_name(result); }

// After a test() that completed nothing: NCCL 2.28's proxy progress loop yields the core and comes
// straight back (spin); the sleep driver pauses.
bool g_spin = false;
void pause_us(int us) {
  if (g_spin) {
    sched_yield();
    return;
  }
  if (us <= 0) return;
  timespec pause{0, static_cast<long>(us) * 1000};
  nanosleep(&pause, nullptr);
}

double seconds_since(int64_t start_ms) { return (tools::monotonic_ms() - start_ms) / 1000.0; }

// CPU of every thread of this process (the plugin's helpers included), user + system.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// The transport's CPU: every thread but the driver's, plus the driver's time inside plugin calls.
// The driver's own loop (sleeping and waking every --poll-us to test) is NCCL's proxy's in a real
// job, which polls whatever the plugin does; at 1 Gbit/s it alone was a third of the process's CPU.
class TransportCpu {
 public:
  TransportCpu() : process_start_(process_cpu_seconds()), driver_start_(thread_cpu_seconds()) {}
  template <typename Call> int call(Call&& plugin_call) {
    const double before = thread_cpu_seconds();
    const int result = plugin_call();
    in_plugin_ += thread_cpu_seconds() - before;
    return result;
  }
  // Returns the transport's CPU seconds so far; *driver gets the driver loop's own.
  double seconds(double* driver) const {
    const double driver_total = thread_cpu_seconds() - driver_start_;
    *driver = driver_total - in_plugin_;
    return process_cpu_seconds() - process_start_ - *driver;
  }

 private:
  double process_start_, driver_start_, in_plugin_ = 0;
};

void print_result(uint64_t bytes, double seconds, uint64_t messages, const TransportCpu& cpu) {
  double driver = 0;
  const double transport = cpu.seconds(&driver);
  printf("RESULT bytes=%llu seconds=%.6f messages=%llu cpu=%.6f driver_cpu=%.6f\n",
         static_cast<unsigned long long>(bytes), seconds, static_cast<unsigned long long>(messages), transport, driver);
  fflush(stdout);
}

struct Buffers {
  tools::NetPlugin& net;
  void* comm;
  std::vector<std::vector<unsigned char>> data;
  std::vector<void*> mhandles;
  Buffers(tools::NetPlugin& n, void* c, int count, size_t size, int zeros_percent, int word)
      : net(n), comm(c), data(count), mhandles(count) {
    uint32_t x = 12345;
    for (int i = 0; i < count; ++i) {
      // Random words, none zero unless asked: a codec that elides zeros gets no easy ride.
      data[i].assign(size, 0);
      for (size_t at = 0; at + word <= size; at += word) {
        x = x * 1664525u + 1013904223u;
        if (static_cast<int>((x >> 8) % 100) < zeros_percent) continue;
        for (int b = 0; b < word; ++b) data[i][at + b] = static_cast<unsigned char>((x >> (8 * b)) | 1);
      }
      net.reg_mr(comm, data[i].data(), size, tools::kPtrHost, &mhandles[i]);
    }
  }
  ~Buffers() {
    for (void* mhandle : mhandles) {
      if (mhandle) net.dereg_mr(comm, mhandle);
    }
  }
};

// Keeps `window` sends outstanding until the time is up, then sends `window` empty messages.
int stream_send(tools::NetPlugin& net, void* comm, const PeerOptions& o) {
  Buffers buffers(net, comm, o.window, o.size, o.zeros_percent, o.word);
  TransportCpu cpu;
  std::deque<std::pair<void*, size_t>> in_flight;  // request, size
  uint64_t bytes = 0, messages = 0, posted = 0;
  int tails_posted = 0;
  const int64_t start = tools::monotonic_ms();
  const int64_t stop = start + static_cast<int64_t>(o.seconds * 1000);
  int64_t last_progress = start;
  double elapsed = 0;
  while (tails_posted < o.window || !in_flight.empty()) {
    while (static_cast<int>(in_flight.size()) < o.window && tails_posted < o.window) {
      const bool tail = tools::monotonic_ms() >= stop;
      const size_t size = tail ? 0 : o.size;
      const int slot = static_cast<int>(posted % o.window);
      void* request = nullptr;
      const int result = cpu.call(
          [&] { return net.isend(comm, buffers.data[slot].data(), size, 0, buffers.mhandles[slot], &request); });
      if (result != tools::kNetSuccess) return fail(failed("isend", result));
      if (!request) break;  // the plugin is full: test and come back
      in_flight.emplace_back(request, size);
      ++posted;
      tails_posted += tail;
    }
    if (in_flight.empty()) {
      pause_us(o.poll_us);  // the plugin took nothing: let it breathe
      continue;
    }
    int done = 0, size = 0;
    const int result = cpu.call([&] { return net.test(in_flight.front().first, &done, &size); });
    if (result != tools::kNetSuccess) return fail(failed("test", result));
    if (!done) {
      if (tools::monotonic_ms() - last_progress > kStallTimeoutMs) return fail("send stalled");
      pause_us(o.poll_us);
      continue;
    }
    last_progress = tools::monotonic_ms();
    if (in_flight.front().second > 0) {
      bytes += in_flight.front().second;
      ++messages;
      elapsed = seconds_since(start);
    }
    in_flight.pop_front();
  }
  print_result(bytes, elapsed, messages, cpu);
  return 0;
}

// Keeps `window` receives posted until the first empty message arrives, then drains the rest.
int stream_recv(tools::NetPlugin& net, void* comm, const PeerOptions& o) {
  Buffers buffers(net, comm, o.window, o.size, o.zeros_percent, o.word);
  TransportCpu cpu;
  std::deque<void*> in_flight;
  uint64_t bytes = 0, messages = 0, posted = 0, completed = 0;
  // Messages are matched in order, so the first empty one (index z) tells the total: z + window.
  uint64_t end_index = UINT64_MAX;
  int64_t start = 0, last_progress = tools::monotonic_ms();
  double elapsed = 0;
  while (posted < end_index || !in_flight.empty()) {
    while (posted < end_index && static_cast<int>(in_flight.size()) < o.window) {
      const int slot = static_cast<int>(posted % o.window);
      void* data = buffers.data[slot].data();
      size_t size = o.size;
      int tag = 0;
      void* request = nullptr;
      const int result =
          cpu.call([&] { return net.irecv(comm, 1, &data, &size, &tag, &buffers.mhandles[slot], &request); });
      if (result != tools::kNetSuccess) return fail(failed("irecv", result));
      if (!request) break;
      in_flight.push_back(request);
      ++posted;
    }
    if (in_flight.empty()) {
      pause_us(o.poll_us);  // the plugin took nothing: let it breathe
      continue;
    }
    int done = 0, size = 0;
    const int result = cpu.call([&] { return net.test(in_flight.front(), &done, &size); });
    if (result != tools::kNetSuccess) return fail(failed("test", result));
    if (!done) {
      if (tools::monotonic_ms() - last_progress > kStallTimeoutMs) return fail("receive stalled");
      pause_us(o.poll_us);
      continue;
    }
    last_progress = tools::monotonic_ms();
    if (size > 0) {
      if (messages++ == 0) start = last_progress;  // the clock starts at the first arrival
      bytes += static_cast<uint64_t>(size);
      elapsed = seconds_since(start);
    } else if (end_index == UINT64_MAX) {
      end_index = completed + static_cast<uint64_t>(o.window);
    }
    ++completed;
    in_flight.pop_front();
  }
  print_result(bytes, elapsed, messages, cpu);
  return 0;
}

}  // namespace

int run_peer(const PeerOptions& o) {
  g_spin = o.spin;
  if (o.window < 1 || o.window > tools::kMaxRequests) return fail("--window must be 1..32");
  alarm(static_cast<unsigned>(o.seconds) + 90);  // a hung peer dies; the driver reports it
  tools::LoaderOptions loader;
  loader.version = o.version;
  std::string error;
  auto net = tools::NetPlugin::open(o.plugin, loader, &error);
  if (!net) return fail(error);
  int result = net->init();
  if (result != tools::kNetSuccess) return fail(failed("init", result));
  int ndev = 0;
  result = net->devices(&ndev);
  if (result != tools::kNetSuccess || ndev < 1) return fail("no network device (check SIEVE_SOCKET_IFNAME)");
  int status = 0;
  if (o.sender) {
    tools::NetHandle handle;
    if (!tools::NetHandle::from_hex(o.handle, &handle)) return fail("bad --handle");
    void* comm = nullptr;
    result = tools::connect_until(*net, 0, &handle, &comm, kSetupTimeoutMs);
    if (!comm) return fail(failed("connect", result));
    status = stream_send(*net, comm, o);
    // Stay connected until the driver has the receiver's verdict: closing first could look like an error.
    char byte;
    while (read(STDIN_FILENO, &byte, 1) > 0) {}
    net->close_send(comm);
  } else {
    tools::NetHandle handle;
    void* listen_comm = nullptr;
    result = net->listen(0, &handle, &listen_comm);
    if (result != tools::kNetSuccess) return fail(failed("listen", result));
    printf("HANDLE %s\n", handle.to_hex().c_str());
    fflush(stdout);
    void* comm = nullptr;
    result = tools::accept_until(*net, listen_comm, &comm, kSetupTimeoutMs);
    if (!comm) return fail(failed("accept", result));
    status = stream_recv(*net, comm, o);
    net->close_recv(comm);
    net->close_listen(listen_comm);
  }
  result = net->finalize();
  return status != 0 ? status : result == tools::kNetSuccess ? 0 : fail(failed("finalize", result));
}

}  // namespace sieve::perf
