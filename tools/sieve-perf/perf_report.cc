// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-perf/perf_report.h"

#include <algorithm>
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

namespace {

// A table cell: the value with `digits` decimals, or "-" when it is not known.
std::string number(bool known, double value, int digits) {
  if (!known) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// Shaper holds per GB, rounded: "-" where the link has no shaper or the run failed.
std::string holds(const Measure& m) { return number(m.ok && m.holds_per_gb() >= 0, m.holds_per_gb(), 0); }

}  // namespace

Measure median_of(const std::vector<Measure>& runs) {
  Measure m;
  if (runs.empty()) return m.error = "no run", m;
  for (const Measure& r : runs)
    if (!r.ok) return r;
  if (runs.size() == 1) return runs.front();
  auto median = [&](auto field) {
    std::vector<double> values;
    for (const Measure& r : runs) values.push_back(field(r));
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  };
  m.ok = true;
  m.gbps = median([](const Measure& r) { return r.gbps; });
  m.bytes = 1e9;  // so that cpu_per_gb() is the median CPU per GB
  m.cpu_seconds = median([](const Measure& r) { return r.cpu_per_gb(); });
  m.cpu_sender = median([](const Measure& r) { return r.bytes > 0 ? r.cpu_sender / (r.bytes / 1e9) : 0; });
  m.cpu_receiver = median([](const Measure& r) { return r.bytes > 0 ? r.cpu_receiver / (r.bytes / 1e9) : 0; });
  m.cpu_driver = median([](const Measure& r) { return r.bytes > 0 ? r.cpu_driver / (r.bytes / 1e9) : 0; });
  m.cpu_process = median([](const Measure& r) { return r.bytes > 0 ? r.cpu_process / (r.bytes / 1e9) : 0; });
  const bool holds_known =
      std::all_of(runs.begin(), runs.end(), [](const Measure& r) { return r.holds_per_gb() >= 0; });
  m.shaper_holds = holds_known ? median([](const Measure& r) { return r.holds_per_gb(); }) : -1;
  return m;
}

std::string format_table(const std::vector<LinkResult>& results, const Options& o, bool* failed) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line,
                "\nsieve-perf: %s (ncclNetPlugin_v%d), %zu-byte messages, window %d, %g s per run, iperf3 -P %d, %s "
                "driver, %d busy thread(s), %s\n\n",
                o.plugin.c_str(), o.abi_loaded, o.size, o.window, o.seconds, o.iperf_streams, o.driver.c_str(), o.busy,
                o.runs > 1 ? ("medians of " + std::to_string(o.runs) + " alternating runs").c_str() : "1 run");
  out << line;
  out << "| link | iperf3 Gbit/s | Sieve Gbit/s | ratio | iperf3 CPU s/GB | Sieve CPU s/GB | ratio | iperf3 held/GB | "
         "Sieve held/GB | verdict |\n";
  out << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : results) {
    const std::string v = verdict(r, failed);
    const bool both = r.iperf.ok && r.sieve.ok;
    out << "| " << r.link << " | " << number(r.iperf.ok, r.iperf.gbps, 2) << " | "
        << number(r.sieve.ok, r.sieve.gbps, 2) << " | "
        << number(both && r.iperf.gbps > 0, r.sieve.gbps / r.iperf.gbps, 2) << " | "
        << number(r.iperf.ok, r.iperf.cpu_per_gb(), 3) << " | " << number(r.sieve.ok, r.sieve.cpu_per_gb(), 3) << " | "
        << number(both && r.iperf.cpu_per_gb() > 0, r.sieve.cpu_per_gb() / r.iperf.cpu_per_gb(), 2) << " | "
        << holds(r.iperf) << " | " << holds(r.sieve) << " | " << v << " |\n";
  }
  if (!o.compare.empty()) {
    out << "\nSide by side with " << o.compare << " (same driver, same run):\n\n";
    out << "| link | Sieve Gbit/s | other Gbit/s | Sieve / other | Sieve CPU s/GB | other CPU s/GB | Sieve / other | "
           "Sieve held/GB | other held/GB |\n";
    out << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const auto& r : results) {
      const bool both = r.sieve.ok && r.other.ok;
      out << "| " << r.link << " | " << number(r.sieve.ok, r.sieve.gbps, 2) << " | "
          << number(r.other.ok, r.other.gbps, 2) << " | "
          << number(both && r.other.gbps > 0, r.sieve.gbps / r.other.gbps, 2) << " | "
          << number(r.sieve.ok, r.sieve.cpu_per_gb(), 3) << " | " << number(r.other.ok, r.other.cpu_per_gb(), 3)
          << " | " << number(both && r.other.cpu_per_gb() > 0, r.sieve.cpu_per_gb() / r.other.cpu_per_gb(), 2) << " | "
          << holds(r.sieve) << " | " << holds(r.other) << " |\n";
    }
  }
  const bool any_holds = std::any_of(results.begin(), results.end(), [](const LinkResult& r) {
    return r.iperf.holds_per_gb() >= 0 || r.sieve.holds_per_gb() >= 0 || r.other.holds_per_gb() >= 0;
  });
  if (any_holds)
    out << "\nheld/GB: packets the link's shaper (tbf on the sending node) held back per GB moved; a sender at the "
           "shaper's rate pays a timer for each, which shows in its CPU per GB (docs/PERFORMANCE.md).\n";
  for (const auto& r : results) {
    if (!o.compare.empty() && !r.other.ok && r.sieve.ok)
      out << "\n" << r.link << ": " << o.compare << " failed: " << r.other.error << "\n";
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
  if (m.holds_per_gb() >= 0) json.member("shaper_holds_per_gb", m.holds_per_gb());
  json.end_object();
}

}  // namespace

std::string format_json(const std::vector<LinkResult>& results, const Options& o) {
  std::ostringstream out;
  tools::JsonWriter json(out);
  json.begin_object();
  json.member("plugin", o.plugin);
  json.member("abi", o.abi_loaded);
  json.member("message_bytes", static_cast<uint64_t>(o.size));
  json.member("window", o.window);
  json.member("seconds", o.seconds);
  json.member("iperf_streams", o.iperf_streams);
  json.member("driver", o.driver);
  json.member("busy_threads", o.busy);
  json.member("runs", o.runs);
  json.member("compare", o.compare);
  json.key("links");
  json.begin_array();
  for (const auto& r : results) {
    bool ignored = false;
    json.begin_object();
    json.member("link", r.link);
    json.member("rate", r.rate);
    write_measure(json, "iperf3", r.iperf);
    write_measure(json, "sieve", r.sieve);
    if (!o.compare.empty()) write_measure(json, "compare", r.other);
    json.member("verdict", verdict(r, &ignored));
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out << '\n';
  return out.str();
}

}  // namespace sieve::perf
