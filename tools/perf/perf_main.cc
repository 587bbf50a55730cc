// sieve-perf: point-to-point throughput of the plugin against iperf3 on the same link in the same
// run, and the CPU seconds both ends spend per GB moved. Links: loopback, a veth pair between two
// namespaces (unshaped) and the same pair shaped by tbf to 1 and 10 Gbit/s (tools/netlab.sh).
// The plugin runs in two sieve-perf peer processes, loaded through tools/common's loader exactly as
// NCCL would load it. CPU: iperf3's from wait4() of its two processes; Sieve's over the streaming
// phase of both peers: the plugin's helper threads plus the driver's time inside plugin calls (the
// driver's own polling loop, NCCL's proxy's in a job, and whole-process figures are in --json).
//
//   sieve-perf [--links loopback,veth,veth-1g,veth-10g] [--seconds 10] [--size 4M] [--window 8]
//              [--version 0|8..11] [--plugin PATH] [--iperf-streams 1] [--poll-us 1000] [--json FILE]
//              [--strict] [--smoke]
// Bars (shaped links): Sieve >= 95 % of iperf3's Gbit/s and <= 1.5x its CPU s/GB. Others: reported.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tools/common/netlab.h"
#include "tools/common/plugin_loader.h"
#include "tools/common/subprocess.h"
#include "tools/perf/perf_peer.h"

namespace sieve::perf {
namespace {

struct Options {
  std::vector<std::string> links = {"loopback", "veth", "veth-1g", "veth-10g"};
  double seconds = 10;
  size_t size = 4u << 20;
  int window = 8;
  int version = 0;
  std::string plugin = SIEVE_PLUGIN_DEFAULT;
  int iperf_streams = 1;
  int poll_us = 1000;
  int zeros_percent = 0;
  int word = 4;
  std::string json;
  bool strict = false;
};

struct Measure {
  bool ok = false;
  std::string error;
  double gbps = 0;
  double bytes = 0;
  double cpu_seconds = 0;  // both ends
  double cpu_sender = 0, cpu_receiver = 0;
  double cpu_process = 0;  // both ends, whole processes start to exit (start-up included)
  double cpu_driver = 0;   // both ends, the driver's polling loop outside plugin calls (not in cpu_seconds)
  double cpu_per_gb() const { return bytes > 0 ? cpu_seconds / (bytes / 1e9) : 0; }
};

struct LinkResult {
  std::string link;
  std::string rate;  // "" unshaped
  Measure iperf, sieve;
};

double cpu_of(const tools::Child& child) {
  const rusage& u = child.usage();
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

bool parse_size(const std::string& text, size_t* out) {
  char* end = nullptr;
  const double value = strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0) return false;
  double scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1024, ++end;
  else if (*end == 'M' || *end == 'm') scale = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') scale = 1024.0 * 1024 * 1024, ++end;
  if (*end) return false;
  *out = static_cast<size_t>(value * scale);
  return true;
}

// The number after "key": inside the first JSON object that follows `section`.
double json_number(const std::string& json, const std::string& section, const std::string& key) {
  const size_t at = json.find("\"" + section + "\"");
  if (at == std::string::npos) return -1;
  const size_t close = json.find('}', at);
  const size_t k = json.find("\"" + key + "\"", at);
  if (k == std::string::npos || k > close) return -1;
  return strtod(json.c_str() + json.find(':', k) + 1, nullptr);
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
  auto server = tools::Child::spawn(in_node(lab, 0, {"iperf3", "-s", "-1", "--forceflush", "-p", std::to_string(port)}), {}, &error);
  if (!server) return m.error = error, m;
  std::string line;
  if (!server->expect_line({"Server listening"}, &line, 10000)) return m.error = "iperf3 server did not start", m;
  char seconds[32];
  snprintf(seconds, sizeof seconds, "%g", o.seconds);
  auto client = tools::Child::spawn(in_node(lab, 1, {"iperf3", "-c", server_addr, "-p", std::to_string(port), "-t",
                                                     seconds, "-P", std::to_string(o.iperf_streams), "-J"}),
                                    {}, &error);
  if (!client) return m.error = error, m;
  std::string json;
  const int timeout = static_cast<int>(o.seconds * 1000) + 30000;
  while (client->read_line(&line, timeout)) json += line + "\n";
  int status = 0;
  if (!client->wait_exit(&status, 10000) || status != 0) return m.error = "iperf3 client failed: " + json, m;
  if (!server->wait_exit(&status, 10000)) return m.error = "iperf3 server did not exit", m;
  m.bytes = json_number(json, "sum_received", "bytes");
  const double bps = json_number(json, "sum_received", "bits_per_second");
  if (m.bytes <= 0 || bps <= 0) return m.error = "no sum_received in iperf3's JSON", m;
  m.gbps = bps / 1e9;
  m.cpu_sender = cpu_of(*client);
  m.cpu_receiver = cpu_of(*server);
  m.cpu_seconds = m.cpu_sender + m.cpu_receiver;
  m.cpu_process = m.cpu_seconds;
  m.ok = true;
  return m;
}

Measure run_sieve(const Options& o, const std::string& self, const tools::NetLab* lab) {
  Measure m;
  std::vector<std::string> common = {"--plugin", o.plugin, "--version", std::to_string(o.version),
                                     "--size", std::to_string(o.size), "--window", std::to_string(o.window),
                                     "--seconds", std::to_string(o.seconds), "--poll-us", std::to_string(o.poll_us),
                                     "--zeros", std::to_string(o.zeros_percent), "--word", std::to_string(o.word)};
  std::vector<std::string> env = {std::string("SIEVE_SOCKET_IFNAME=") + (lab ? "=eth0" : "lo")};
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

bool shaped(const LinkResult& r) { return !r.rate.empty(); }

std::string verdict(const LinkResult& r, bool* failed) {
  if (!r.iperf.ok || !r.sieve.ok) {
    *failed = true;
    return "ERROR";
  }
  if (!shaped(r)) return "reported";
  const bool fast = r.sieve.gbps >= 0.95 * r.iperf.gbps;
  const bool frugal = r.sieve.cpu_per_gb() <= 1.5 * r.iperf.cpu_per_gb();
  if (fast && frugal) return "PASS";
  *failed = true;
  return std::string("FAIL") + (fast ? "" : " (throughput)") + (frugal ? "" : " (CPU)");
}

void print_table(const std::vector<LinkResult>& results, const Options& o, bool* failed) {
  printf("\nsieve-perf: %s, %zu-byte messages, window %d, %g s per run, iperf3 -P %d\n\n", o.plugin.c_str(), o.size,
         o.window, o.seconds, o.iperf_streams);
  printf("| link | iperf3 Gbit/s | Sieve Gbit/s | ratio | iperf3 CPU s/GB | Sieve CPU s/GB | ratio | verdict |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const auto& r : results) {
    const std::string v = verdict(r, failed);
    const double thr = r.iperf.gbps > 0 ? r.sieve.gbps / r.iperf.gbps : 0;
    const double cpu = r.iperf.cpu_per_gb() > 0 ? r.sieve.cpu_per_gb() / r.iperf.cpu_per_gb() : 0;
    printf("| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.2f | %s |\n", r.link.c_str(), r.iperf.gbps, r.sieve.gbps,
           thr, r.iperf.cpu_per_gb(), r.sieve.cpu_per_gb(), cpu, v.c_str());
  }
  for (const auto& r : results) {
    if (!r.iperf.ok) printf("\n%s: iperf3 failed: %s\n", r.link.c_str(), r.iperf.error.c_str());
    if (!r.sieve.ok) printf("\n%s: Sieve failed: %s\n", r.link.c_str(), r.sieve.error.c_str());
  }
  fflush(stdout);
}

void write_measure(std::ostringstream& out, const char* name, const Measure& m) {
  out << "\"" << name << "\": {\"ok\": " << (m.ok ? "true" : "false") << ", \"gbps\": " << m.gbps
      << ", \"bytes\": " << m.bytes << ", \"cpu_seconds\": " << m.cpu_seconds << ", \"cpu_sender\": " << m.cpu_sender
      << ", \"cpu_receiver\": " << m.cpu_receiver << ", \"cpu_process\": " << m.cpu_process
      << ", \"cpu_driver\": " << m.cpu_driver
      << ", \"cpu_s_per_gb\": " << m.cpu_per_gb() << "}";
}

bool write_json(const std::string& path, const std::vector<LinkResult>& results, const Options& o) {
  std::ostringstream out;
  out << "{\"plugin\": \"" << o.plugin << "\", \"message_bytes\": " << o.size << ", \"window\": " << o.window
      << ", \"seconds\": " << o.seconds << ", \"iperf_streams\": " << o.iperf_streams << ", \"links\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    bool ignored = false;
    const auto& r = results[i];
    out << (i ? ", " : "") << "{\"link\": \"" << r.link << "\", \"rate\": \"" << r.rate << "\", ";
    write_measure(out, "iperf3", r.iperf);
    out << ", ";
    write_measure(out, "sieve", r.sieve);
    out << ", \"verdict\": \"" << verdict(r, &ignored) << "\"}";
  }
  out << "]}\n";
  FILE* file = fopen(path.c_str(), "w");
  if (!file) return false;
  fputs(out.str().c_str(), file);
  return fclose(file) == 0;
}

int usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s [--links loopback,veth,veth-1g,veth-10g] [--seconds S] [--size 4M] [--window 8]\n"
          "          [--version 0|8..11] [--plugin PATH] [--iperf-streams N] [--poll-us N] [--json FILE]\n"
          "          [--zeros PERCENT] [--word 4|2] [--strict] [--smoke]\n"
          "  --zeros: that share of the streamed words is zero (4-byte words, or 2-byte with --word 2)\n",
          argv0);
  return 2;
}

}  // namespace
}  // namespace sieve::perf

int main(int argc, char** argv) {
  using namespace sieve;
  using namespace sieve::perf;
  signal(SIGPIPE, SIG_IGN);
  Options o;
  PeerOptions peer;
  std::string role;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (key == "--strict") o.strict = true;
    else if (key == "--smoke") o.links = {"loopback"}, o.seconds = 1, o.size = 1u << 20;
    else if (key == "--links") {
      o.links.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) o.links.push_back(item);
    } else if (key == "--seconds") o.seconds = atof(value().c_str());
    else if (key == "--size") { if (!parse_size(value(), &o.size)) return usage(argv[0]); }
    else if (key == "--window") o.window = atoi(value().c_str());
    else if (key == "--version") o.version = atoi(value().c_str());
    else if (key == "--plugin") o.plugin = value();
    else if (key == "--iperf-streams") o.iperf_streams = atoi(value().c_str());
    else if (key == "--poll-us") o.poll_us = atoi(value().c_str());
    else if (key == "--zeros") o.zeros_percent = atoi(value().c_str());
    else if (key == "--word") o.word = atoi(value().c_str());
    else if (key == "--json") o.json = value();
    else if (key == "--peer") role = value();
    else if (key == "--handle") peer.handle = value();
    else return usage(argv[0]);
  }
  if (o.seconds <= 0 || o.size == 0 || o.window < 1 || o.window > 32) return usage(argv[0]);
  if (o.zeros_percent < 0 || o.zeros_percent > 100 || (o.word != 4 && o.word != 2)) return usage(argv[0]);
  if (!role.empty()) {
    if (role != "send" && role != "recv") return usage(argv[0]);
    peer.plugin = o.plugin;
    peer.version = o.version;
    peer.sender = role == "send";
    peer.size = o.size;
    peer.window = o.window;
    peer.seconds = o.seconds;
    peer.poll_us = o.poll_us;
    peer.zeros_percent = o.zeros_percent;
    peer.word = o.word;
    return run_peer(peer);
  }

  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fprintf(stderr, "sieve-perf: cannot find its own executable\n"), 1;
  self[n] = 0;
  std::vector<LinkResult> results;
  int port = 5201 + getpid() % 1000;
  for (const auto& link : o.links) {
    LinkResult r;
    r.link = link;
    std::unique_ptr<tools::NetLab> lab;
    if (link == "veth-1g") r.rate = "1gbit";
    else if (link == "veth-10g") r.rate = "10gbit";
    else if (link != "veth" && link != "loopback") return fprintf(stderr, "sieve-perf: unknown link %s\n", link.c_str()), 2;
    if (link != "loopback") {
      const std::string why = tools::NetLab::unavailable_reason();
      if (!why.empty()) return fprintf(stderr, "sieve-perf: %s: %s\n", link.c_str(), why.c_str()), 1;
      lab = std::make_unique<tools::NetLab>(2, "--p2p" + (r.rate.empty() ? "" : " --rate " + r.rate));
      if (!lab->ok()) return fprintf(stderr, "sieve-perf: netlab: %s\n", lab->error().c_str()), 1;
    }
    fprintf(stderr, "sieve-perf: %s: iperf3 ...\n", link.c_str());
    r.iperf = run_iperf(o, lab.get(), port++);
    fprintf(stderr, "sieve-perf: %s: Sieve ...\n", link.c_str());
    r.sieve = run_sieve(o, self, lab.get());
    results.push_back(r);
  }
  bool failed = false;
  print_table(results, o, &failed);
  if (!o.json.empty() && !write_json(o.json, results, o)) {
    fprintf(stderr, "sieve-perf: cannot write %s\n", o.json.c_str());
    return 1;
  }
  bool errors = false;
  for (const auto& r : results) errors |= !r.iperf.ok || !r.sieve.ok;
  return errors || (o.strict && failed) ? 1 : 0;
}
