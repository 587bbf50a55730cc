// SPDX-License-Identifier: Apache-2.0
#include "plugin/stats_export.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "net/log.h"
#include "plugin/net/peer_traffic.h"
#include "plugin/stats.h"

namespace sieve::plugin {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

uint64_t load(const std::atomic<uint64_t>& counter) { return counter.load(std::memory_order_relaxed); }

std::mutex& export_mutex() {
  static std::mutex* mutex = new std::mutex();  // never destroyed: used by the exit-time stop
  return *mutex;
}

// The running export: the claim on a name without %p outlives the writer's final write.
struct Export {
  std::unique_ptr<StatsFileClaim> claim;
  std::unique_ptr<StatsWriter> writer;
  bool refused = false;  // a setting that cannot work is warned once, not at every start
  std::string written;   // the file this process wrote, kept across a stop and a new start

  // Stopping at exit, too: a process that exits normally writes its final totals.
  ~Export() {
    std::lock_guard<std::mutex> lock(export_mutex());
    stop();
  }

  void stop() {
    writer.reset();  // its destructor writes the final snapshot
    claim.reset();
  }
};

// SIEVE_STATS_MODE's choices are the file modes themselves.
unsigned stats_file_mode(config::StatsMode mode) {
  switch (mode) {
    case config::StatsMode::kOwner: return 0600;
    case config::StatsMode::kGroup: return 0640;
    case config::StatsMode::kWorld: return 0644;
  }
  return 0600;
}

Export& the_export() {
  // Constructed before the export so that they outlive it at exit (statics die in reverse order).
  process_stats();
  peer_traffic();
  static Export running;
  return running;
}

}  // namespace

Snapshot current_snapshot() {
  const ProcessStats& stats = process_stats();
  Snapshot s;
  s.unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  s.pid = static_cast<int>(getpid());
  s.host = host_name();
  s.rank = launcher_rank([](const char* name) -> const char* { return std::getenv(name); });
  s.job = launcher_job([](const char* name) -> const char* { return std::getenv(name); });
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
  s.tables_activated = load(stats.tables_activated);
  s.tables_refused = load(stats.tables_refused);
  s.learned_calls_observed = load(stats.learned_calls_observed);
  s.learned_bytes_saved = load(stats.learned_bytes_saved);
  s.learned_pattern_changes = load(stats.learned_pattern_changes);
  s.learned_signatures_retired = load(stats.learned_signatures_retired);
  s.peers = peer_traffic();
  for (const auto& p : s.peers) s.totals.busy_ns += p.counters.busy_ns;
  return s;
}

std::string start_stats_export(const config::Settings& settings) {
  if (settings.stats_file.empty()) return "";
  std::lock_guard<std::mutex> lock(export_mutex());
  Export& e = the_export();
  if (e.writer) return "";
  const int pid = static_cast<int>(getpid());
  const std::string host = host_name();
  std::string problem = stats_path_problem(expand_stats_path(settings.stats_file, pid, host));
  std::unique_ptr<StatsFileClaim> claim;
  std::string path;
  if (problem.empty()) {
    std::string note;
    path = choose_stats_path(settings.stats_file, pid, host, &claim, &note, e.written);
    if (!note.empty() && !e.refused) SIEVE_WARN("%s", note.c_str());
  }
  // SIEVE_STATS_JOB names the job where the launcher does not (a pod's job name from the downward API).
  StatsWriter::Source source = [job = settings.stats_job]() {
    Snapshot s = current_snapshot();
    if (!job.empty()) s.job = job;
    return s;
  };
  auto writer = problem.empty() ? std::make_unique<StatsWriter>(path, settings.stats_format, settings.stats_interval_s,
                                                                source, stats_file_mode(settings.stats_mode))
                                : nullptr;
  if (writer && !stats_directory_writable(path, &problem)) writer.reset();
  if (!problem.empty()) {
    problem = "SIEVE_STATS_FILE=" + settings.stats_file + ": " + problem;
    if (!e.refused) SIEVE_WARN("%s; traffic statistics will not be exported", problem.c_str());
    e.refused = true;
    return problem;
  }
  e.claim = std::move(claim);
  e.writer = std::move(writer);
  e.written = path;
  SIEVE_INFO("traffic statistics go to %s (%s, %s)", path.c_str(), config::choice_text(settings.stats_format).c_str(),
             settings.stats_interval_s > 0
                 ? ("every " + std::to_string(settings.stats_interval_s) + " s and when connections end").c_str()
                 : "when connections end");
  return "";
}

void write_stats_export() {
  std::lock_guard<std::mutex> lock(export_mutex());
  Export& e = the_export();
  if (!e.writer) return;
  std::string error;
  if (!e.writer->write_now(&error)) SIEVE_WARN("%s", error.c_str());
}

void stop_stats_export() {
  std::lock_guard<std::mutex> lock(export_mutex());
  the_export().stop();
}

}  // namespace sieve::plugin
