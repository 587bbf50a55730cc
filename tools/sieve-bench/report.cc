// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <vector>

#include "tools/common/json_writer.h"

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

bool RunReport::all_checked_exact() const {
  if (wrong_values || !failure.empty()) return false;
  for (const ModeResult& mode : modes) {
    if (mode.name != "gloo" && mode.ok) return true;
  }
  return false;
}

namespace {

std::string fixed(double value, int digits, const char* suffix = "") {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f%s", digits, value, suffix);
  return text;
}

// Megabytes as the table shows them; amounts too small to show in MB (a tiny --masks model) in kB
// or bytes, so two different amounts never both read "0.0 MB".
std::string megabytes(double bytes) {
  char text[32];
  if (bytes >= 1e5) std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  else if (bytes >= 1e3) std::snprintf(text, sizeof text, "%.1f kB", bytes / 1e3);
  else std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  return text;
}

std::string count_of(long count, const char* noun) {
  return std::to_string(count) + ' ' + noun + (count == 1 ? "" : "s");
}

// A speedup, or "-" where none is defined (nothing kept: the ideal is unbounded).
std::string speedup_text(double speedup) {
  return std::isfinite(speedup) && speedup > 0 ? fixed(speedup, 2, "x") : "-";
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
      << dtype_label(r.dtype) << " in ";
  if (r.fsdp) {
    out << count_of(static_cast<long>(r.groups), "FSDP group") << ", sharded on dim 0 with "
        << fixed(100.0 * r.padding_fraction, 1) << " % padding";
  } else {
    out << count_of(static_cast<long>(r.buckets), "DDP bucket");
  }
  out << "), " << count_of(r.nodes, "node") << ", " << r.link << '\n';
  out << "pruning: " << r.prune << " (" << fixed(100.0 * r.kept_fraction, 1) << " % of all elements kept); "
      << r.iterations;
  if (r.fsdp) {
    out << " measured steps per mode\n(a step: every group's all-gather of parameters, then every group's "
           "reduce-scatter of"
           " gradients;\ntime: the slowest node's, median and best)\n";
    out << "compacted: " << r.groups_compacted << " of " << r.groups << " groups (the proxy leaves a group dense below"
        << " 16384 elements or above 90 % kept),\neach shard's kept elements padded to the largest shard's: "
        << fixed(100.0 * r.compacted_share, 1) << " % of the dense elements\n\n";
  } else {
    out << " measured all-reduces per mode (time: the slowest node's, median and best)\n\n";
  }
  const ModeResult* dense = find(r, "dense");
  out << pad("mode", 10, false) << pad("median time", 17) << pad("best", 9) << pad("logical/node", 14)
      << pad("plugin wire/node", 18) << pad("kernel tx/node", 16) << pad("speedup", 9) << pad("ideal", 8) << '\n';
  for (const ModeResult& m : r.modes) {
    out << pad(m.name, 10, false);
    if (!m.ok) {
      if (!m.seconds.empty()) {  // stopped part-way (a deadline): what finished is still a result
        out << pad(fixed(m.median_seconds(), 3, " s"), 17) << pad(fixed(m.min_seconds(), 3, " s"), 9) << "  ("
            << m.seconds.size() << " of " << r.iterations << " measured " << (r.fsdp ? "steps" : "all-reduces")
            << " finished)";
      }
      out << "  FAILED: " << m.error << '\n';
      continue;
    }
    out << pad(fixed(m.median_seconds(), 3, " s"), 17) << pad(fixed(m.min_seconds(), 3, " s"), 9)
        << pad(m.logical_bytes > 0 ? megabytes(m.logical_bytes) : "-", 14)
        << pad(m.has_plugin_wire ? megabytes(m.plugin_wire_bytes) : "-", 18)
        << pad(m.has_kernel ? megabytes(m.kernel_tx_bytes) : "-", 16)
        << pad(dense && m.median_seconds() > 0 ? speedup_text(dense->median_seconds() / m.median_seconds()) : "-", 9)
        << pad(speedup_text(m.ideal_speedup), 8) << '\n';
  }
  for (const ModeResult& m : r.modes) {
    if (m.ok && !m.note.empty()) out << "\n" << m.name << ": " << m.note;
    if (m.ok && m.mean_compaction_seconds() > 0) {
      out << "\n"
          << m.name << ": " << fixed(m.mean_compaction_seconds(), 3, " s") << " of each "
          << (r.fsdp ? "step" : "all-reduce")
          << " is the gather and scatter, run on the CPU here (the proxy runs them on the GPU).";
    }
  }
  out << '\n';
  if (!r.failure.empty()) {
    out << "FAILED: " << r.failure << '\n';
  } else if (r.all_checked_exact()) {
    out << (r.fsdp ? "Every all-gathered element and every reduce-scattered shard was checked against the exact value: "
                     "all correct.\n"
                   : "Every element of every all-reduce was checked against the exact sum: all correct.\n");
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
  const std::string speedup = fixed(dense->median_seconds() / fast->median_seconds(), 1);
  std::ostringstream out;
  // The bytes are the table's logical/node column: what each node handed the transport.
  const char* what = r.fsdp ? "the FSDP traffic (parameters and gradients) of " : "the gradients of ";
  const char* unit = r.fsdp ? "step" : "all-reduce";
  const char* checked = r.fsdp ? "value" : "sum";
  if (r.kept_fraction >= 1.0) {
    // Nothing pruned (--density 1): the modes move the same bytes, and any time difference is noise.
    out << "Nothing of " << r.model
        << " was pruned, so Sieve had nothing to leave out: " << megabytes(fast->logical_bytes) << " per node and "
        << unit << " either way, " << fixed(fast->median_seconds(), 2) << " s against "
        << fixed(dense->median_seconds(), 2) << " s dense, every " << checked << " exact.";
  } else if (dense->median_seconds() <= fast->median_seconds() || speedup == "1.0") {
    out << "Sieve moved " << what << r.model << " (" << fixed(pruned, 0) << " % pruned) between "
        << count_of(r.nodes, "node") << " as " << megabytes(fast->logical_bytes) << " instead of "
        << megabytes(dense->logical_bytes) << " per node and " << unit
        << ", but no faster: " << fixed(fast->median_seconds(), 2) << " s against " << fixed(dense->median_seconds(), 2)
        << " s dense, every " << checked << " exact.";
  } else {
    out << "Sieve moved " << what << r.model << " (" << fixed(pruned, 0) << " % pruned) " << speedup
        << "x faster between " << count_of(r.nodes, "node") << ": " << megabytes(fast->logical_bytes) << " instead of "
        << megabytes(dense->logical_bytes) << " per node and " << unit << ", " << fixed(fast->median_seconds(), 2)
        << " s instead of " << fixed(dense->median_seconds(), 2) << " s, every " << checked << " exact.";
  }
  if (const ModeResult* gloo = find(r, "gloo")) {
    out << " PyTorch Gloo on the same link: " << fixed(gloo->median_seconds(), 2) << " s.";
  }
  return out.str();
}

std::string format_json(const RunReport& r) {
  std::ostringstream out;
  tools::JsonWriter json(out);
  json.begin_object();
  json.member("model", r.model);
  json.member("parameters", static_cast<int64_t>(r.parameters));
  json.member("collectives", r.fsdp ? "fsdp" : "ddp");
  if (r.fsdp) {
    json.member("groups", static_cast<uint64_t>(r.groups));
    json.member("groups_compacted", static_cast<uint64_t>(r.groups_compacted));
    json.member("padding_fraction", r.padding_fraction);
    json.member("compacted_share", r.compacted_share);
  } else {
    json.member("buckets", static_cast<uint64_t>(r.buckets));
  }
  json.member("dtype", dtype_label(r.dtype));
  json.member("nodes", r.nodes);
  json.member("link", r.link);
  json.member("pruning", r.prune);
  json.member("kept_fraction", r.kept_fraction);
  json.member("iterations", r.iterations);
  // true: everything ran and every sum matched; false: a sum did not match; null: not all checked.
  json.key("exact");
  if (r.wrong_values) json.value(false);
  else if (r.all_checked_exact()) json.value(true);
  else json.null();
  json.member("failure", r.failure);
  json.key("modes");
  json.begin_array();
  const ModeResult* dense = find(r, "dense");
  auto number_or_null = [&json](const char* name, bool known, double value) {
    json.key(name);
    if (known) json.value(value);
    else json.null();
  };
  for (const ModeResult& m : r.modes) {
    json.begin_object();
    json.member("mode", m.name);
    json.member("ok", m.ok);
    json.member("error", m.error);
    json.key("seconds");
    json.begin_array();
    for (double seconds : m.seconds) json.value(seconds);
    json.end_array();
    json.member("finished_iterations", static_cast<uint64_t>(m.seconds.size()));
    json.member("compaction_seconds", m.mean_compaction_seconds());
    json.member("mean_seconds", m.mean_seconds());
    json.member("median_seconds", m.median_seconds());
    json.member("logical_bytes_per_node", std::round(m.logical_bytes));
    number_or_null("plugin_wire_bytes_per_node", m.has_plugin_wire, std::round(m.plugin_wire_bytes));
    number_or_null("kernel_tx_bytes_per_node", m.has_kernel, std::round(m.kernel_tx_bytes));
    number_or_null("speedup", dense && m.ok && m.median_seconds() > 0,
                   dense ? dense->median_seconds() / std::max(m.median_seconds(), 1e-300) : 0);
    number_or_null("ideal_speedup", m.ideal_speedup > 0 && std::isfinite(m.ideal_speedup), m.ideal_speedup);
    json.member("device", m.device);
    json.member("note", m.note);
    json.end_object();
  }
  json.end_array();
  json.member("summary", summary_line(r));
  json.end_object();
  out << '\n';
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
