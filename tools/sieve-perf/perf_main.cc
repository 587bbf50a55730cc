// SPDX-License-Identifier: Apache-2.0
// sieve-perf: point-to-point throughput of the plugin against iperf3 on the same link in the same
// run, and the CPU seconds both ends spend per GB moved. Links: loopback, a veth pair between two
// namespaces (unshaped) and the same pair shaped by tbf to 1 and 10 Gbit/s (tools/share/netlab.sh).
// The plugin runs in two sieve-perf peer processes, loaded through tools/common's loader exactly as
// NCCL would load it. CPU: iperf3's from wait4() of its two processes; Sieve's over the streaming
// phase of both peers: the plugin's helper threads plus the driver's time inside plugin calls (the
// driver's own polling loop, NCCL's proxy's in a job, and whole-process figures are in --json).
//
//   sieve-perf [--links loopback,veth,veth-1g,veth-10g] [--seconds 10] [--size 4M] [--window 8]
//              [--abi 0|8..12] [--plugin PATH] [--iperf-streams 1] [--poll-us 1000] [--json FILE]
//              [--driver sleep|spin] [--busy N] [--compare PLUGIN.so] [--runs N]
//              [--zeros PERCENT] [--word 4|2] [--strict] [--smoke] [--version] [--help]
// Bars (shaped links): Sieve >= 95 % of iperf3's Gbit/s and <= 1.5x its CPU s/GB. Others: reported.
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "plugin/sieve.h"
#include "tools/common/install_layout.h"
#include "tools/common/json_fields.h"
#include "tools/common/netlab.h"
#include "tools/common/stop_signal.h"
#include "tools/common/subprocess.h"
#include "tools/nccl_emulator/plugin_loader.h"
#include "tools/sieve-perf/perf_options.h"
#include "tools/sieve-perf/perf_peer.h"
#include "tools/sieve-perf/perf_report.h"

namespace sieve::perf {
namespace {

double cpu_of(const tools::Child& child) {
  const rusage& u = child.usage();
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

std::vector<std::string> in_node(const tools::NetLab* lab, int node, std::vector<std::string> argv) {
  if (!lab) return argv;
  std::vector<std::string> wrapped = {"ip", "netns", "exec", lab->ns(node)};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

// iperf3 from node 1 to node 0 (the direction Sieve's sender uses too).
Measure run_iperf(const Options& o, const tools::NetLab* lab, int port) {
  Measure m;
  const std::string server_addr = lab ? lab->addr(0) : "127.0.0.1";
  std::string error;
  auto server = tools::Child::spawn(in_node(lab, 0, {"iperf3", "-s", "-1", "--forceflush", "-p", std::to_string(port)}),
                                    {}, &error);
  if (!server) return m.error = error, m;
  std::string line;
  if (!server->expect_line({"Server listening"}, &line, 10000)) return m.error = "iperf3 server did not start", m;
  char seconds[32];
  snprintf(seconds, sizeof seconds, "%g", o.seconds);
  auto client = tools::Child::spawn(in_node(lab, 1,
                                            {"iperf3", "-c", server_addr, "-p", std::to_string(port), "-t", seconds,
                                             "-P", std::to_string(o.iperf_streams), "-J"}),
                                    {}, &error);
  if (!client) return m.error = error, m;
  std::string json;
  const int timeout = static_cast<int>(o.seconds * 1000) + 30000;
  while (client->read_line(&line, timeout)) json += line + "\n";
  int status = 0;
  if (!client->wait_exit(&status, 10000) || status != 0) return m.error = "iperf3 client failed: " + json, m;
  if (!server->wait_exit(&status, 10000)) return m.error = "iperf3 server did not exit", m;
  tools::json_fields::Value report;
  const tools::json_fields::Value* received =
      tools::json_fields::whole(json, &report) ? tools::json_fields::find_anywhere(report, "sum_received") : nullptr;
  m.bytes = received ? tools::json_fields::number_or(*received, "bytes", -1) : -1;
  const double bps = received ? tools::json_fields::number_or(*received, "bits_per_second", -1) : -1;
  if (m.bytes <= 0 || bps <= 0) return m.error = "no sum_received in iperf3's JSON", m;
  m.gbps = bps / 1e9;
  m.cpu_sender = cpu_of(*client);
  m.cpu_receiver = cpu_of(*server);
  m.cpu_seconds = m.cpu_sender + m.cpu_receiver;
  m.cpu_process = m.cpu_seconds;
  m.ok = true;
  return m;
}

// Threads that burn CPU while they live: a node whose cores are busy with the training job.
class Burners {
 public:
  explicit Burners(int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~Burners() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

Measure run_sieve(const Options& o, const std::string& self, const tools::NetLab* lab, const std::string& plugin) {
  Measure m;
  std::vector<std::string> common = {"--plugin",  plugin,
                                     "--abi",     plugin == o.plugin ? std::to_string(o.abi) : "0",
                                     "--driver",  o.driver,
                                     "--size",    std::to_string(o.size),
                                     "--window",  std::to_string(o.window),
                                     "--seconds", std::to_string(o.seconds),
                                     "--poll-us", std::to_string(o.poll_us),
                                     "--zeros",   std::to_string(o.zeros_percent),
                                     "--word",    std::to_string(o.word)};
  // Both plugins are pointed at the link's interface (NCCL's socket transport reads NCCL_SOCKET_IFNAME).
  std::vector<std::string> env = {std::string("SIEVE_TRANSPORT=") + tools::kEmulatedLinkTransport,
                                  std::string("SIEVE_SOCKET_IFNAME=") + (lab ? "=eth0" : "lo"),
                                  std::string("NCCL_SOCKET_IFNAME=") + (lab ? "=eth0" : "=lo")};
  std::vector<std::string> argv = {self, "--peer", "recv"};
  argv.insert(argv.end(), common.begin(), common.end());
  std::string error, line;
  auto receiver = tools::Child::spawn(in_node(lab, 0, argv), env, &error);
  if (!receiver) return m.error = error, m;
  if (!receiver->expect_line({"HANDLE ", "FAIL"}, &line, 30000) || line.rfind("HANDLE ", 0) != 0) {
    return m.error = "receiver: " + receiver->transcript(), m;
  }
  argv = {self, "--peer", "send", "--handle", line.substr(7)};
  argv.insert(argv.end(), common.begin(), common.end());
  auto sender = tools::Child::spawn(in_node(lab, 1, argv), env, &error);
  if (!sender) return m.error = error, m;
  const int timeout = static_cast<int>(o.seconds * 1000) + 60000;
  std::string received, sent;
  if (!receiver->expect_line({"RESULT", "FAIL"}, &received, timeout) || received.rfind("RESULT", 0) != 0) {
    return m.error = "receiver: " + receiver->transcript(), m;
  }
  if (!sender->expect_line({"RESULT", "FAIL"}, &sent, 30000) || sent.rfind("RESULT", 0) != 0) {
    return m.error = "sender: " + sender->transcript(), m;
  }
  sender->close_stdin();
  int status = 0;
  if (!receiver->wait_exit(&status, 30000) || status != 0) return m.error = "receiver exit status", m;
  if (!sender->wait_exit(&status, 30000) || status != 0) return m.error = "sender exit status", m;
  unsigned long long bytes = 0, messages = 0, sent_bytes = 0, sent_messages = 0;
  double seconds = 0, sent_seconds = 0;
  double driver_receiver = 0, driver_sender = 0;
  if (sscanf(received.c_str(), "RESULT bytes=%llu seconds=%lf messages=%llu cpu=%lf driver_cpu=%lf", &bytes, &seconds,
             &messages, &m.cpu_receiver, &driver_receiver) != 5 ||
      seconds <= 0 ||
      sscanf(sent.c_str(), "RESULT bytes=%llu seconds=%lf messages=%llu cpu=%lf driver_cpu=%lf", &sent_bytes,
             &sent_seconds, &sent_messages, &m.cpu_sender, &driver_sender) != 5) {
    return m.error = "bad result lines: " + received + " / " + sent, m;
  }
  m.bytes = static_cast<double>(bytes);
  m.gbps = m.bytes * 8 / seconds / 1e9;
  // The bar compares the streaming phase (the plugin's steady state: its helper threads and the
  // driver's time inside plugin calls) with iperf3's whole processes, whose start-up costs a few
  // milliseconds; Sieve's start-up (dlopen, device and topology discovery: about 0.1 s measured) and
  // the driver's own polling loop (NCCL's proxy's, in a job) are reported apart.
  m.cpu_seconds = m.cpu_sender + m.cpu_receiver;
  m.cpu_driver = driver_sender + driver_receiver;
  m.cpu_process = cpu_of(*sender) + cpu_of(*receiver);
  m.ok = true;
  return m;
}

// Whether `path` can be written: created if missing (and removed again), opened for appending if not.
bool output_file_writable(const std::string& path, std::string* error) {
  const bool existed = access(path.c_str(), F_OK) == 0;
  FILE* file = fopen(path.c_str(), "a");
  if (!file) return *error = strerror(errno), false;
  fclose(file);
  if (!existed) remove(path.c_str());
  return true;
}

// A peer process of run_sieve: the options it was started with, as the peer takes them.
int run_as_peer(const Options& o) {
  PeerOptions peer;
  peer.plugin = o.plugin;
  peer.version = o.abi;
  peer.sender = o.peer_role == "send";
  peer.handle = o.handle;
  peer.size = o.size;
  peer.window = o.window;
  peer.seconds = o.seconds;
  peer.poll_us = o.poll_us;
  peer.spin = o.driver == "spin";
  peer.zeros_percent = o.zeros_percent;
  peer.word = o.word;
  return run_peer(peer);
}

// Everything that can be known before the first measurement is checked now, not after iperf3 ran:
// 0, or the exit status after saying why.
int check_before_measuring(Options& o) {
  std::string error;
  const std::string conflict = tools::emulated_link_transport_conflict("sieve-perf");
  if (!conflict.empty()) return fprintf(stderr, "sieve-perf: %s\n", conflict.c_str()), 2;
  if (!o.plugin_given && access(o.plugin.c_str(), R_OK) != 0)
    return fprintf(stderr,
                   "sieve-perf: libnccl-net-sieve.so is not installed beside sieve-perf (%s does not exist): "
                   "install Sieve, or pass --plugin PATH\n",
                   o.plugin.c_str()),
           2;
  std::string abi_error;
  const std::vector<int> exported = tools::exported_versions(o.plugin, &abi_error);
  if (exported.empty()) return fprintf(stderr, "sieve-perf: --plugin %s: %s\n", o.plugin.c_str(), abi_error.c_str()), 2;
  if (o.abi != 0 && std::find(exported.begin(), exported.end(), o.abi) == exported.end())
    return fprintf(stderr, "sieve-perf: --abi %d: %s does not export ncclNetPlugin_v%d\n", o.abi, o.plugin.c_str(),
                   o.abi),
           2;
  o.abi_loaded = o.abi != 0 ? o.abi : exported.front();
  if (!o.compare.empty() && tools::exported_versions(o.compare, &abi_error).empty())
    return fprintf(stderr, "sieve-perf: --compare %s: %s\n", o.compare.c_str(), abi_error.c_str()), 2;
  // The results file is checked now, not after minutes of measuring: it is created (and removed
  // again if it did not exist), so a missing directory or a read-only place is refused at once.
  if (!o.json.empty() && !output_file_writable(o.json, &error))
    return fprintf(stderr, "sieve-perf: --json %s: %s\n", o.json.c_str(), error.c_str()), 2;
  return 0;
}

// One link: its lab (or why there is none), then alternating runs of iperf3, Sieve and --compare,
// the median of each. Stops early on a stop signal, leaving the caller to see it.
LinkResult measure_link(const Options& o, const std::string& link, const char* self, const std::string& lab_unavailable,
                        int* port) {
  LinkResult r;
  r.link = link;
  r.rate = link_rate(link);
  std::unique_ptr<tools::NetLab> lab;
  if (link_needs_lab(link)) {
    std::string why = lab_unavailable;
    if (why.empty()) {
      lab = std::make_unique<tools::NetLab>(2, "--p2p" + (r.rate.empty() ? "" : " --rate " + r.rate));
      if (!lab->ok()) why = "netlab: " + lab->error();
    }
    if (!why.empty()) {
      fprintf(stderr, "sieve-perf: %s: %s\n", link.c_str(), why.c_str());
      r.iperf.error = r.sieve.error = why;
      return r;
    }
  }
  // Alternating runs, so a slow spell of this shared machine falls on every transport alike.
  std::vector<Measure> iperf, sieve, other;
  // Node 1 sends in every run; its shaper's count of held-back packets is read around each one.
  const auto shaped = [&](const std::function<Measure()>& measure) {
    const long long before = lab && !r.rate.empty() ? lab->shaper_holds(1) : -1;
    Measure m = measure();
    const long long after = before >= 0 ? lab->shaper_holds(1) : -1;
    if (after >= before && before >= 0) m.shaper_holds = static_cast<double>(after - before);
    return m;
  };
  for (int run = 0; run < o.runs && !tools::stop_signal(); ++run) {
    Burners busy(o.busy);
    fprintf(stderr, "sieve-perf: %s: run %d/%d: iperf3 ...\n", link.c_str(), run + 1, o.runs);
    iperf.push_back(shaped([&] { return run_iperf(o, lab.get(), (*port)++); }));
    fprintf(stderr, "sieve-perf: %s: run %d/%d: Sieve ...\n", link.c_str(), run + 1, o.runs);
    if (tools::stop_signal()) break;
    sieve.push_back(shaped([&] { return run_sieve(o, self, lab.get(), o.plugin); }));
    if (!o.compare.empty() && !tools::stop_signal()) {
      fprintf(stderr, "sieve-perf: %s: run %d/%d: %s ...\n", link.c_str(), run + 1, o.runs, o.compare.c_str());
      other.push_back(shaped([&] { return run_sieve(o, self, lab.get(), o.compare); }));
    }
  }
  r.iperf = median_of(iperf);
  r.sieve = median_of(sieve);
  if (!o.compare.empty()) r.other = median_of(other);
  return r;
}

// The table on stdout and --json's file; the exit status: 1 on a failed run or (--strict) a missed bar.
int report(const std::vector<LinkResult>& results, const Options& o) {
  bool failed = false;
  fputs(format_table(results, o, &failed).c_str(), stdout);
  fflush(stdout);
  if (!o.json.empty()) {
    FILE* file = fopen(o.json.c_str(), "w");
    const std::string json = format_json(results, o);
    if (!file || fputs(json.c_str(), file) < 0 || fclose(file) != 0) {
      fprintf(stderr, "sieve-perf: --json: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  bool errors = false;
  for (const auto& r : results) errors |= !r.iperf.ok || !r.sieve.ok || (!o.compare.empty() && !r.other.ok);
  return errors || (o.strict && failed) ? 1 : 0;
}

}  // namespace
}  // namespace sieve::perf

int main(int argc, char** argv) {
  using namespace sieve;
  using namespace sieve::perf;
  signal(SIGPIPE, SIG_IGN);
  Options o;
  std::string error;
  if (!parse_options(argc, argv, &o, &error)) {
    fprintf(stderr, "sieve-perf: %s\n", error.c_str());
    return 2;
  }
  if (o.help) return fputs(usage_text().c_str(), stdout), 0;
  if (o.version) return printf("sieve-perf %s\n", SIEVE_VERSION_STRING), 0;
  if (!o.plugin_given) o.plugin = tools::InstallLayout::current().plugin();  // installed, else this build tree's
  if (!o.peer_role.empty()) return run_as_peer(o);
  if (const int status = check_before_measuring(o)) return status;
  tools::install_stop_handlers();

  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fprintf(stderr, "sieve-perf: cannot find its own executable\n"), 1;
  self[n] = 0;
  // A link that cannot run here (no root for namespaces) is reported as that link's error; the
  // links measured before and after it are kept.
  const std::string lab_unavailable = tools::NetLab::unavailable_reason();
  std::vector<LinkResult> results;
  int port = 5201 + getpid() % 1000;
  for (const auto& link : o.links) {
    if (tools::stop_signal()) break;
    LinkResult r = measure_link(o, link, self, lab_unavailable, &port);
    // Interrupted: the lab and every process of this link went with measure_link's objects.
    if (tools::stop_signal()) break;
    results.push_back(r);
  }
  if (tools::stop_signal()) {
    fprintf(stderr, "sieve-perf: interrupted by %s: its processes were stopped and its namespaces removed\n",
            tools::stop_signal_name().c_str());
    return 128 + tools::stop_signal();
  }
  return report(results, o);
}
