#include "tools/bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <vector>

#include "compress/json.h"

namespace sieve::bench {

double ModeResult::mean_seconds() const {
  if (seconds.empty()) return 0;
  return std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
}

double ModeResult::mean_compaction_seconds() const {
  if (compaction_seconds.empty()) return 0;
  return std::accumulate(compaction_seconds.begin(), compaction_seconds.end(), 0.0) /
         static_cast<double>(compaction_seconds.size());
}

double ModeResult::median_seconds() const {
  if (seconds.empty()) return 0;
  std::vector<double> sorted(seconds);
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  return sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

double ModeResult::min_seconds() const {
  return seconds.empty() ? 0 : *std::min_element(seconds.begin(), seconds.end());
}

namespace {

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

std::string fixed(double value, int digits, const char* suffix = "") {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f%s", digits, value, suffix);
  return text;
}

std::string pad(const std::string& text, size_t width, bool right = true) {
  if (text.size() >= width) return text;
  return right ? std::string(width - text.size(), ' ') + text : text + std::string(width - text.size(), ' ');
}

const ModeResult* find(const RunReport& report, const std::string& name) {
  for (const ModeResult& mode : report.modes) {
    if (mode.name == name && mode.ok) return &mode;
  }
  return nullptr;
}


}  // namespace

std::string format_table(const RunReport& r) {
  std::ostringstream out;
  out << "sieve-bench: " << r.model << " (" << r.parameters << " parameters, " << megabytes(r.model_bytes()) << ' '
      << dtype_name(r.dtype) << " in " << r.buckets << " DDP buckets), " << r.nodes << " nodes, " << r.link << '\n';
  out << "pruning: " << r.prune << " (" << fixed(100.0 * r.kept_fraction, 1) << " % of all elements kept); "
      << r.iterations << " measured all-reduces per mode (time: the slowest node's, median and best)\n\n";
  const ModeResult* dense = find(r, "dense");
  out << pad("mode", 10, false) << pad("median time", 17) << pad("best", 9) << pad("logical/node", 14)
      << pad("plugin wire/node", 18) << pad("kernel tx/node", 16) << pad("speedup", 9) << pad("ideal", 8) << '\n';
  for (const ModeResult& m : r.modes) {
    out << pad(m.name, 10, false);
    if (!m.ok) {
      out << "  FAILED: " << m.error << '\n';
      continue;
    }
    out << pad(fixed(m.median_seconds(), 3, " s"), 17) << pad(fixed(m.min_seconds(), 3, " s"), 9)
        << pad(m.logical_bytes > 0 ? megabytes(m.logical_bytes) : "-", 14)
        << pad(m.has_plugin_wire ? megabytes(m.plugin_wire_bytes) : "-", 18)
        << pad(m.has_kernel ? megabytes(m.kernel_tx_bytes) : "-", 16)
        << pad(dense && m.median_seconds() > 0 ? fixed(dense->median_seconds() / m.median_seconds(), 2, "x") : "-", 9)
        << pad(m.ideal_speedup > 0 ? fixed(m.ideal_speedup, 2, "x") : "-", 8) << '\n';
  }
  for (const ModeResult& m : r.modes) {
    if (m.ok && m.mean_compaction_seconds() > 0) {
      out << "\n" << m.name << ": " << fixed(m.mean_compaction_seconds(), 3, " s")
          << " of each all-reduce is the gather and scatter, run on the CPU here (the proxy runs them on the GPU).";
    }
  }
  out << '\n';
  if (!r.failure.empty()) {
    out << "FAILED: " << r.failure << '\n';
  } else {
    out << "Every element of every all-reduce was checked against the exact sum: all correct.\n";
    const std::string line = summary_line(r);
    if (!line.empty()) out << line << '\n';
  }
  return out.str();
}

std::string summary_line(const RunReport& r) {
  const ModeResult* dense = find(r, "dense");
  const ModeResult* fast = find(r, "compacted");
  if (fast == nullptr) fast = find(r, "codec");
  if (dense == nullptr || fast == nullptr || fast->median_seconds() <= 0) return "";
  const double pruned = 100.0 * (1.0 - r.kept_fraction);
  std::ostringstream out;
  out << "Sieve moved " << r.model << "'s gradients (" << fixed(pruned, 0) << " % pruned) "
      << fixed(dense->median_seconds() / fast->median_seconds(), 1) << "x faster between " << r.nodes << " nodes: "
      << megabytes(r.model_bytes() * r.kept_fraction) << " instead of " << megabytes(r.model_bytes())
      << " per all-reduce, " << fixed(fast->median_seconds(), 2) << " s instead of " << fixed(dense->median_seconds(), 2)
      << " s, every sum exact.";
  if (const ModeResult* gloo = find(r, "gloo")) {
    out << " PyTorch Gloo on the same link: " << fixed(gloo->median_seconds(), 2) << " s.";
  }
  return out.str();
}

std::string format_json(const RunReport& r) {
  std::ostringstream out;
  out << "{\"model\":\"" << compress::json::escape(r.model) << "\",\"parameters\":" << r.parameters << ",\"buckets\":" << r.buckets
      << ",\"dtype\":\"" << dtype_name(r.dtype) << "\",\"nodes\":" << r.nodes << ",\"link\":\"" << compress::json::escape(r.link)
      << "\",\"pruning\":\"" << compress::json::escape(r.prune) << "\",\"kept_fraction\":" << r.kept_fraction
      << ",\"iterations\":" << r.iterations << ",\"exact\":" << (r.exact ? "true" : "false") << ",\"failure\":\""
      << compress::json::escape(r.failure) << "\",\"modes\":[";
  const ModeResult* dense = find(r, "dense");
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const ModeResult& m = r.modes[i];
    out << (i ? "," : "") << "{\"mode\":\"" << m.name << "\",\"ok\":" << (m.ok ? "true" : "false") << ",\"error\":\""
        << compress::json::escape(m.error) << "\",\"seconds\":[";
    for (size_t k = 0; k < m.seconds.size(); ++k) out << (k ? "," : "") << m.seconds[k];
    out << "],\"compaction_seconds\":" << m.mean_compaction_seconds() << ",\"mean_seconds\":" << m.mean_seconds() << ",\"median_seconds\":" << m.median_seconds() << ",\"logical_bytes_per_node\":" << m.logical_bytes
        << ",\"plugin_wire_bytes_per_node\":";
    if (m.has_plugin_wire) out << m.plugin_wire_bytes; else out << "null";
    out << ",\"kernel_tx_bytes_per_node\":";
    if (m.has_kernel) out << m.kernel_tx_bytes; else out << "null";
    out << ",\"speedup\":";
    if (dense && m.ok && m.median_seconds() > 0) out << dense->median_seconds() / m.median_seconds(); else out << "null";
    out << ",\"ideal_speedup\":";
    if (m.ideal_speedup > 0) out << m.ideal_speedup; else out << "null";
    out << ",\"device\":\"" << compress::json::escape(m.device) << "\"}";
  }
  out << "],\"summary\":\"" << compress::json::escape(summary_line(r)) << "\"}\n";
  return out.str();
}

Progress::Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

Progress::~Progress() { finish(); }

void Progress::update(const std::string& label, int done, int total) {
  if (!enabled_ || total <= 0) return;
  const int width = 30;
  const int filled = std::clamp(done * width / total, 0, width);
  std::fprintf(stderr, "\r%-10s [%s%s] %d/%d ", label.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(width - filled), '.').c_str(), done, total);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r%s\r", std::string(60, ' ').c_str());
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace sieve::bench
