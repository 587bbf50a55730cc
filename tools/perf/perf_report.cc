#include "tools/perf/perf_report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "tools/common/json_writer.h"

namespace sieve::perf {

std::string verdict(const LinkResult& r, bool* failed) {
  if (!r.iperf.ok || !r.sieve.ok) {
    *failed = true;
    return "ERROR";
  }
  if (r.rate.empty()) return "reported";
  const bool fast = r.sieve.gbps >= 0.95 * r.iperf.gbps;
  const bool frugal = r.sieve.cpu_per_gb() <= 1.5 * r.iperf.cpu_per_gb();
  if (fast && frugal) return "PASS";
  *failed = true;
  return std::string("FAIL") + (fast ? "" : " (throughput)") + (frugal ? "" : " (CPU)");
}

std::string format_table(const std::vector<LinkResult>& results, const Options& o, bool* failed) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "\nsieve-perf: %s, %zu-byte messages, window %d, %g s per run, iperf3 -P %d\n\n",
                o.plugin.c_str(), o.size, o.window, o.seconds, o.iperf_streams);
  out << line;
  out << "| link | iperf3 Gbit/s | Sieve Gbit/s | ratio | iperf3 CPU s/GB | Sieve CPU s/GB | ratio | verdict |\n";
  out << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : results) {
    const std::string v = verdict(r, failed);
    auto number = [](bool known, double value, int digits) {
      if (!known) return std::string("-");
      char text[32];
      std::snprintf(text, sizeof text, "%.*f", digits, value);
      return std::string(text);
    };
    const bool both = r.iperf.ok && r.sieve.ok;
    out << "| " << r.link << " | " << number(r.iperf.ok, r.iperf.gbps, 2) << " | " << number(r.sieve.ok, r.sieve.gbps, 2)
        << " | " << number(both && r.iperf.gbps > 0, r.sieve.gbps / r.iperf.gbps, 2) << " | "
        << number(r.iperf.ok, r.iperf.cpu_per_gb(), 3) << " | " << number(r.sieve.ok, r.sieve.cpu_per_gb(), 3) << " | "
        << number(both && r.iperf.cpu_per_gb() > 0, r.sieve.cpu_per_gb() / r.iperf.cpu_per_gb(), 2) << " | " << v
        << " |\n";
  }
  for (const auto& r : results) {
    if (!r.iperf.ok && !r.sieve.ok && r.iperf.error == r.sieve.error) {  // the link itself could not run
      out << "\n" << r.link << ": not run: " << r.iperf.error << "\n";
      continue;
    }
    if (!r.iperf.ok) out << "\n" << r.link << ": iperf3 failed: " << r.iperf.error << "\n";
    if (!r.sieve.ok) out << "\n" << r.link << ": Sieve failed: " << r.sieve.error << "\n";
  }
  return out.str();
}

namespace {

void write_measure(tools::JsonWriter& json, const char* name, const Measure& m) {
  json.key(name);
  json.begin_object();
  json.member("ok", m.ok);
  json.member("error", m.error);
  json.member("gbps", m.gbps);
  json.member("bytes", std::round(m.bytes));
  json.member("cpu_seconds", m.cpu_seconds);
  json.member("cpu_sender", m.cpu_sender);
  json.member("cpu_receiver", m.cpu_receiver);
  json.member("cpu_process", m.cpu_process);
  json.member("cpu_driver", m.cpu_driver);
  json.member("cpu_s_per_gb", m.cpu_per_gb());
  json.end_object();
}

}  // namespace

std::string format_json(const std::vector<LinkResult>& results, const Options& o) {
  std::ostringstream out;
  tools::JsonWriter json(out);
  json.begin_object();
  json.member("plugin", o.plugin);
  json.member("message_bytes", static_cast<uint64_t>(o.size));
  json.member("window", o.window);
  json.member("seconds", o.seconds);
  json.member("iperf_streams", o.iperf_streams);
  json.key("links");
  json.begin_array();
  for (const auto& r : results) {
    bool ignored = false;
    json.begin_object();
    json.member("link", r.link);
    json.member("rate", r.rate);
    write_measure(json, "iperf3", r.iperf);
    write_measure(json, "sieve", r.sieve);
    json.member("verdict", verdict(r, &ignored));
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out << '\n';
  return out.str();
}

}  // namespace sieve::perf
