// SPDX-License-Identifier: Apache-2.0
// Telemetry for ops: a snapshot of what this process moved (totals, per device, per peer) rendered
// as JSON or Prometheus text, and a writer that puts it in SIEVE_STATS_FILE every
// SIEVE_STATS_INTERVAL seconds and whenever its owner asks (plugin/stats_export.h says when). Each
// write goes to a temporary file of its own, renamed over the target, so a scraper never reads half a
// file, even with several writers of one path; a path without %p is written by one process only
// (choose_stats_path), so processes never overwrite each other, together or in turn.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plugin/config.h"

namespace sieve::plugin {

struct TrafficCounters {
  uint64_t bytes_logical_sent = 0;
  uint64_t bytes_wire_sent = 0;
  uint64_t bytes_logical_received = 0;
  uint64_t bytes_wire_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t busy_ns = 0;  // time with at least one request in flight

  TrafficCounters& operator+=(const TrafficCounters& other);
};

struct PeerTraffic {
  std::string device;  // local interface name
  std::string peer;    // remote address:port
  TrafficCounters counters;
};

struct Snapshot {
  uint64_t unix_ms = 0;
  int pid = 0;
  std::string host;
  std::string rank;  // the process's rank in its job where the launcher says it, else ""
  std::string job;   // the job's identity (SIEVE_STATS_JOB, else the launcher's), else ""
  TrafficCounters totals;
  uint64_t collectives_dense = 0;
  uint64_t collectives_compacted = 0;
  uint64_t mask_violations = 0;
  uint64_t connections_rejected = 0;
  uint64_t tables_activated = 0;
  uint64_t tables_refused = 0;
  uint64_t learned_calls_observed = 0;
  uint64_t learned_bytes_saved = 0;
  uint64_t learned_pattern_changes = 0;
  uint64_t learned_signatures_retired = 0;
  std::vector<PeerTraffic> peers;
};

// The snapshot's process counters (the proxy's and the connection guard's), one row each: JSON and
// Prometheus render the same rows, so a counter added here appears in both.
struct ProcessCounter {
  const char* json;    // key in the JSON file and field of sieve_stats_t
  const char* metric;  // Prometheus name, without "sieve_" and "_total"
  uint64_t Snapshot::*member;
  const char* help;
};
extern const ProcessCounter kProcessCounters[];
extern const size_t kProcessCounterCount;

// Per-device sums of the peers, in first-seen device order.
std::vector<PeerTraffic> per_device(const Snapshot& snapshot);

std::string to_json(const Snapshot& snapshot);
// Labels stay bounded at any scale and across restarts: `host`, `job` and `rank` (where known) for the
// process, the peer's host (its address, without the ephemeral port) and the local device for the
// per-peer series, whose connections to one host are summed. No pid: each restart would start new
// series. Per-connection detail (the port) is in the JSON only.
std::string to_prometheus(const Snapshot& snapshot);

// "10.0.1.2:4000" -> "10.0.1.2", "[fe80::1]:4000" -> "fe80::1"; anything else as it is.
std::string peer_host(const std::string& peer);

// The rank the job's launcher gives this process (torchrun's RANK, Slurm's SLURM_PROCID, Open MPI's
// OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, in that order), "" when none says. `lookup` is getenv.
std::string launcher_rank(const char* (*lookup)(const char*));

// The job the launcher runs this process in, so that two jobs on a node (or a restarted job beside
// its predecessor's file) are different series: torchrun's TORCHELASTIC_RUN_ID (its --rdzv-id; not
// its default "none"), Slurm's SLURM_JOB_ID, PBS_JOBID, LSF's LSB_JOBID, in that order; "" when none
// says. `lookup` is getenv.
std::string launcher_job(const char* (*lookup)(const char*));

// Expands %p (pid) and %h (host name) so every process of a job writes its own file.
std::string expand_stats_path(const std::string& pattern, int pid, const std::string& host);

// Why `path` (expanded) cannot be a stats file, or "" when it can: it names a directory (the textfile
// collector's, say: the file goes inside it), or its directory does not exist or is not a directory.
// Checked before anything is created, so a wrong setting writes nothing anywhere.
std::string stats_path_problem(const std::string& path);

// Whether the directory of `path` takes new files: a temporary file is created there and removed, the
// file itself is not touched. False with `error` set if not.
bool stats_directory_writable(const std::string& path, std::string* error);

// A process's hold on a stats file whose name has no %p: an advisory lock (flock) on `path`.lock,
// which the kernel drops when the process dies, so a crashed job never blocks the next one. Releasing
// the claim removes the lock file; only a process killed while it held the claim leaves it behind,
// and the next claimant takes it over.
class StatsFileClaim {
 public:
  // nullptr when another live holder has it (or the lock file cannot be created: `*error` says why).
  static std::unique_ptr<StatsFileClaim> take(const std::string& path, std::string* error);
  ~StatsFileClaim();
  StatsFileClaim(const StatsFileClaim&) = delete;
  StatsFileClaim& operator=(const StatsFileClaim&) = delete;

 private:
  StatsFileClaim(int fd, int dir_fd, std::string name) : fd_(fd), dir_fd_(dir_fd), name_(std::move(name)) {}
  int fd_;
  int dir_fd_;        // the lock's directory, held: the lock is removed from where it was taken
  std::string name_;  // the lock's name in it
};

// The file this process writes for SIEVE_STATS_FILE=`pattern`. With %p every process has its own.
// Without, the name is made unique rather than refused: the name as given goes to the first process
// that finds it unclaimed and unwritten (`*claim`, to hold while writing); a process that finds it
// claimed by a live process, or holding an earlier process's final totals, writes the same name with
// ".<pid>" before its extension, and `*note` says so. Nothing is lost, nothing overwritten, whether
// the processes sharing the name run together or one after another. `previous` is the file this
// process wrote before (a second start after a stop): its own file, which it goes on writing.
std::string choose_stats_path(const std::string& pattern, int pid, const std::string& host,
                              std::unique_ptr<StatsFileClaim>* claim, std::string* note,
                              const std::string& previous = "");

// Writes snapshots from `source` to a file: when asked (write_now), every interval_s seconds when
// interval_s > 0 (a thread started by the constructor), and once more at destruction. Never at
// construction: a file exists only once it holds what the process really moved.
class StatsWriter {
 public:
  using Source = std::function<Snapshot()>;
  // `mode`: the file's permissions (SIEVE_STATS_MODE); 0600 unless the operator asks for more.
  StatsWriter(std::string path, config::StatsFileFormat format, int64_t interval_s, Source source,
              unsigned mode = 0600);
  ~StatsWriter();
  StatsWriter(const StatsWriter&) = delete;
  StatsWriter& operator=(const StatsWriter&) = delete;

  // Writes one snapshot now; returns false (with `error` set) if the file cannot be written. Writes
  // are serialised, snapshot included, so the file never goes back to an older snapshot (which a
  // scraper would read as a counter reset).
  bool write_now(std::string* error = nullptr);

 private:
  void run(int64_t interval_s);

  std::string path_;
  int dir_fd_ = -1;          // path_'s directory, opened once (net::open_safe_directory)
  std::string dir_problem_;  // why it could not be, when dir_fd_ < 0
  config::StatsFileFormat format_;
  Source source_;
  unsigned mode_;
  std::mutex write_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace sieve::plugin
