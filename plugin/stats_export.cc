#include "plugin/stats_export.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "net/log.h"
#include "plugin/peer_traffic.h"
#include "plugin/stats.h"

namespace sieve::plugin {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

uint64_t load(const std::atomic<uint64_t>& counter) { return counter.load(std::memory_order_relaxed); }

}  // namespace

Snapshot current_snapshot() {
  const ProcessStats& stats = process_stats();
  Snapshot s;
  s.unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  s.pid = static_cast<int>(getpid());
  s.host = host_name();
  s.totals.bytes_logical_sent = load(stats.bytes_logical_sent);
  s.totals.bytes_wire_sent = load(stats.bytes_wire_sent);
  s.totals.bytes_logical_received = load(stats.bytes_logical_received);
  s.totals.bytes_wire_received = load(stats.bytes_wire_received);
  s.totals.messages_sent = load(stats.messages_sent);
  s.totals.messages_received = load(stats.messages_received);
  s.collectives_dense = load(stats.collectives_dense);
  s.collectives_compacted = load(stats.collectives_compacted);
  s.mask_violations = load(stats.mask_violations);
  s.connections_rejected = load(stats.connections_rejected);
  s.peers = peer_traffic();
  for (const auto& p : s.peers) s.totals.busy_ns += p.counters.busy_ns;
  return s;
}

void start_stats_export(const config::Settings& settings) {
  if (settings.stats_file.empty()) return;
  static std::once_flag once;
  std::call_once(once, [&settings] {
    // Constructed before the writer so that they outlive it at exit (statics die in reverse order).
    process_stats();
    peer_traffic();
    // The claim on a name without %p is held while the writer lives (declared first, dies last).
    static std::unique_ptr<StatsFileClaim> claim;
    std::string note;
    const std::string path =
        choose_stats_path(settings.stats_file, static_cast<int>(getpid()), host_name(), &claim, &note);
    if (!note.empty()) SIEVE_WARN("%s", note.c_str());
    const StatsFormat format = settings.stats_format == "prometheus" ? StatsFormat::Prometheus : StatsFormat::Json;
    static std::unique_ptr<StatsWriter> writer;
    writer = std::make_unique<StatsWriter>(path, format, settings.stats_interval_s, current_snapshot);
    std::string error;
    if (!writer->write_now(&error)) {
      SIEVE_WARN("%s; traffic statistics will not be exported", error.c_str());
      writer.reset();
      return;
    }
    SIEVE_INFO("traffic statistics go to %s (%s%s)", path.c_str(), settings.stats_format.c_str(),
               settings.stats_interval_s > 0 ? ", periodic" : ", at exit");
  });
}

}  // namespace sieve::plugin
