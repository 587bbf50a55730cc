// SPDX-License-Identifier: Apache-2.0
#include "plugin/telemetry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "compress/json.h"
#include "net/own_file.h"

namespace sieve::plugin {

TrafficCounters& TrafficCounters::operator+=(const TrafficCounters& o) {
  bytes_logical_sent += o.bytes_logical_sent;
  bytes_wire_sent += o.bytes_wire_sent;
  bytes_logical_received += o.bytes_logical_received;
  bytes_wire_received += o.bytes_wire_received;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  busy_ns += o.busy_ns;
  return *this;
}

std::vector<PeerTraffic> per_device(const Snapshot& snapshot) {
  std::vector<PeerTraffic> devices;
  for (const auto& p : snapshot.peers) {
    PeerTraffic* slot = nullptr;
    for (auto& d : devices)
      if (d.device == p.device) slot = &d;
    if (!slot) {
      devices.push_back({p.device, "", {}});
      slot = &devices.back();
    }
    slot->counters += p.counters;
  }
  return devices;
}

namespace {

// Prometheus label values escape backslash, double quote and newline.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Field {
  const char* name;    // JSON member
  const char* metric;  // Prometheus name, before _total: what, then the unit in base units
  uint64_t TrafficCounters::*member;
  double scale;  // to the metric's unit
  const char* help;
};

const Field kFields[] = {
    {"bytes_logical_sent", "logical_sent_bytes", &TrafficCounters::bytes_logical_sent, 1, "Bytes NCCL asked to send"},
    {"bytes_wire_sent", "wire_sent_bytes", &TrafficCounters::bytes_wire_sent, 1,
     "Bytes written to the sockets, framing included"},
    {"bytes_logical_received", "logical_received_bytes", &TrafficCounters::bytes_logical_received, 1,
     "Bytes delivered to NCCL"},
    {"bytes_wire_received", "wire_received_bytes", &TrafficCounters::bytes_wire_received, 1,
     "Bytes read from the sockets"},
    {"messages_sent", "messages_sent", &TrafficCounters::messages_sent, 1, "Messages sent"},
    {"messages_received", "messages_received", &TrafficCounters::messages_received, 1, "Messages received"},
    {"busy_ns", "busy_seconds", &TrafficCounters::busy_ns, 1e-9, "Seconds with at least one request in flight"},
};

// A Prometheus sample value: integers exactly, scaled values with enough digits to round-trip.
std::string metric_value(uint64_t raw, double scale) {
  if (scale == 1) return std::to_string(raw);
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", static_cast<double>(raw) * scale);
  return text;
}

std::string counters_json(const TrafficCounters& c) {
  std::string out = "{";
  bool first = true;
  for (const auto& f : kFields) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s\"%s\": %" PRIu64, first ? "" : ", ", f.name, c.*f.member);
    out += buf;
    first = false;
  }
  return out + "}";
}

}  // namespace

const ProcessCounter kProcessCounters[] = {
    {"collectives_dense", "collectives_dense", &Snapshot::collectives_dense,
     "Collectives the proxy passed through dense"},
    {"collectives_compacted", "collectives_compacted", &Snapshot::collectives_compacted,
     "Collectives the proxy ran on a compacted buffer"},
    {"mask_violations", "mask_violations", &Snapshot::mask_violations, "Nonzero values found outside a mask"},
    {"connections_rejected", "connections_rejected", &Snapshot::connections_rejected,
     "Connections dropped for bad magic, nonce or token"},
    {"tables_activated", "tables_activated", &Snapshot::tables_activated,
     "Commits every rank of a communicator agreed on"},
    {"tables_refused", "tables_refused", &Snapshot::tables_refused,
     "Commits the ranks of a communicator did not agree on (that communicator then runs dense)"},
    {"learned_calls_observed", "learned_calls_observed", &Snapshot::learned_calls_observed,
     "All-reduces SIEVE_TRACK watched for stable zeros"},
    {"learned_bytes_saved", "learned_saved_bytes", &Snapshot::learned_bytes_saved,
     "Bytes learned masks kept off the wire (SIEVE_TRACK=observe: would have)"},
    {"learned_pattern_changes", "learned_pattern_changes", &Snapshot::learned_pattern_changes,
     "Learned zero patterns that changed, each a return to dense"},
    {"learned_signatures_retired", "learned_signatures_retired", &Snapshot::learned_signatures_retired,
     "Learned masks that fell back too often and are no longer learned (that all-reduce runs dense)"},
};
const size_t kProcessCounterCount = sizeof(kProcessCounters) / sizeof(kProcessCounters[0]);

std::string to_json(const Snapshot& s) {
  char head[256];
  std::snprintf(head, sizeof(head), "{\n  \"unix_ms\": %" PRIu64 ",\n  \"pid\": %d,\n  \"host\": %s,\n", s.unix_ms,
                s.pid, compress::json::quote(s.host).c_str());
  std::string out = head;
  for (size_t i = 0; i < kProcessCounterCount; ++i)
    out +=
        std::string("  \"") + kProcessCounters[i].json + "\": " + std::to_string(s.*kProcessCounters[i].member) + ",\n";
  out += "  \"totals\": " + counters_json(s.totals) + ",\n  \"devices\": [";
  auto devices = per_device(s);
  for (size_t i = 0; i < devices.size(); ++i)
    out += std::string(i ? ",\n" : "\n") + "    {\"device\": " + compress::json::quote(devices[i].device) +
           ", \"counters\": " + counters_json(devices[i].counters) + "}";
  out += devices.empty() ? "],\n" : "\n  ],\n";
  out += "  \"peers\": [";
  for (size_t i = 0; i < s.peers.size(); ++i)
    out += std::string(i ? ",\n" : "\n") + "    {\"device\": " + compress::json::quote(s.peers[i].device) +
           ", \"peer\": " + compress::json::quote(s.peers[i].peer) +
           ", \"counters\": " + counters_json(s.peers[i].counters) + "}";
  out += s.peers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string peer_host(const std::string& peer) {
  if (!peer.empty() && peer[0] == '[') {
    const size_t close = peer.find(']');
    return close == std::string::npos ? peer : peer.substr(1, close - 1);
  }
  const size_t colon = peer.rfind(':');
  if (colon == std::string::npos || colon + 1 == peer.size() || peer.find(':') != colon) return peer;
  for (size_t i = colon + 1; i < peer.size(); ++i)
    if (peer[i] < '0' || peer[i] > '9') return peer;
  return peer.substr(0, colon);
}

std::string launcher_rank(const char* (*lookup)(const char*)) {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const char* value = lookup(name);
    if (value == nullptr || *value == '\0') continue;
    bool digits = true;
    for (const char* c = value; *c; ++c) digits = digits && *c >= '0' && *c <= '9';
    if (digits) return value;
  }
  return "";
}

std::string launcher_job(const char* (*lookup)(const char*)) {
  for (const char* name : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"}) {
    const char* value = lookup(name);
    if (value != nullptr && *value != '\0' && std::string(value) != "none") return value;
  }
  return "";
}

// Prometheus text exposition. Process totals and per-peer series are different metrics
// (sieve_X_total and sieve_peer_X_total), so sum() over either counts each byte once; every family
// has its HELP and TYPE, then its samples, together.
std::string to_prometheus(const Snapshot& s) {
  std::string out;
  std::string process_labels = "host=\"" + label_value(s.host) + "\"";
  if (!s.job.empty()) process_labels += ",job=\"" + label_value(s.job) + "\"";
  if (!s.rank.empty()) process_labels += ",rank=\"" + label_value(s.rank) + "\"";
  auto family = [&](const std::string& name, const char* help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n";
  };
  // One series per (device, peer host): NCCL's many connections to a host, each from its own
  // ephemeral port, are one series whose number does not grow with connections or restarts.
  std::vector<PeerTraffic> hosts;
  for (const auto& p : s.peers) {
    const std::string host = peer_host(p.peer);
    PeerTraffic* slot = nullptr;
    for (auto& h : hosts)
      if (h.device == p.device && h.peer == host) slot = &h;
    if (!slot) {
      hosts.push_back({p.device, host, {}});
      slot = &hosts.back();
    }
    slot->counters += p.counters;
  }
  for (const auto& f : kFields) {
    const std::string name = std::string("sieve_") + f.metric + "_total";
    family(name, f.help);
    out += name + "{" + process_labels + "} " + metric_value(s.totals.*f.member, f.scale) + "\n";
  }
  for (const auto& f : kFields) {
    const std::string name = std::string("sieve_peer_") + f.metric + "_total";
    family(name, (std::string(f.help) + ", per peer host").c_str());
    for (const auto& h : hosts)
      out += name + "{" + process_labels + ",device=\"" + label_value(h.device) + "\",peer_host=\"" +
             label_value(h.peer) + "\"} " + metric_value(h.counters.*f.member, f.scale) + "\n";
  }
  for (size_t i = 0; i < kProcessCounterCount; ++i) {
    const ProcessCounter& c = kProcessCounters[i];
    const std::string name = std::string("sieve_") + c.metric + "_total";
    family(name, c.help);
    out += name + "{" + process_labels + "} " + std::to_string(s.*c.member) + "\n";
  }
  return out;
}

std::string expand_stats_path(const std::string& pattern, int pid, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char k = pattern[i + 1];
      if (k == 'p') {
        out += std::to_string(pid);
        ++i;
        continue;
      }
      if (k == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (k == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

std::string stats_path_problem(const std::string& path) {
  struct stat st {};
  if (path.empty() || path.back() == '/' || (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
    return path + " is a directory: name a file in it, e.g. " + (path.back() == '/' ? path : path + "/") +
           "sieve-%h-%p.prom";
  std::string problem;
  const int dir_fd = net::open_safe_directory(net::split_path(path).first, &problem);
  if (dir_fd >= 0) ::close(dir_fd);
  return problem;
}

bool stats_directory_writable(const std::string& path, std::string* error) {
  const auto [dir, name] = net::split_path(path);
  std::string problem;
  const int dir_fd = net::open_safe_directory(dir, &problem);
  std::string tmp;
  const int fd = dir_fd < 0 ? -1 : net::create_unique_file_at(dir_fd, name + ".tmp.", "", 0600, &tmp);
  if (fd < 0) {
    if (error) *error = "cannot write stats file " + path + ": " + (dir_fd < 0 ? problem : std::strerror(errno));
    if (dir_fd >= 0) ::close(dir_fd);
    return false;
  }
  ::close(fd);
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  ::close(dir_fd);
  return true;
}

std::unique_ptr<StatsFileClaim> StatsFileClaim::take(const std::string& path, std::string* error) {
  const std::string lock_path = path + ".lock";
  const auto [dir, name] = net::split_path(lock_path);
  // The directory may be shared: never under a symlinked or foreign directory, never through a
  // planted symlink, never another user's file.
  const int dir_fd = net::open_safe_directory(dir, error);
  if (dir_fd < 0) {
    if (error) *error = "cannot lock " + lock_path + ": " + *error;
    return nullptr;
  }
  // A releasing holder removes the lock file: a lock taken on a file that is no longer (or not
  // yet again) at lock_path protects nothing, so take the lock on whatever is there now.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = net::open_own_file_at(dir_fd, name, lock_path, O_RDWR, 0600, error);
    if (fd < 0) break;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (error) *error = errno == EWOULDBLOCK ? "" : "cannot lock " + lock_path + ": " + std::strerror(errno);
      ::close(fd);
      break;
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      return std::unique_ptr<StatsFileClaim>(new StatsFileClaim(fd, dir_fd, name));
    ::close(fd);
    if (attempt == 7 && error) *error = "cannot hold " + lock_path + ": other processes keep replacing it";
  }
  ::close(dir_fd);
  return nullptr;
}

StatsFileClaim::~StatsFileClaim() {
  // Removed while still locked, so no other process can lock this file and then lose it.
  ::unlinkat(dir_fd_, name_.c_str(), 0);
  ::close(fd_);  // releases the lock
  ::close(dir_fd_);
}

namespace {

// "/d/sieve.prom" -> "/d/sieve.<pid>.prom"; no extension: "/d/sieve" -> "/d/sieve.<pid>".
std::string with_pid(const std::string& path, int pid) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = "." + std::to_string(pid);
  return has_extension ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

}  // namespace

namespace {

// Why `path`'s name is held by something this process must not replace (another user's file, a
// link, a FIFO), or "" when it is free or a file of this user's own.
std::string squatter(const std::string& path) {
  const auto [dir, name] = net::split_path(path);
  const int dir_fd = net::open_safe_directory(dir, nullptr);
  if (dir_fd < 0) return "";  // the writer says why it cannot write there
  struct stat st {};
  std::string why;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) why = path + " is taken by something that is not a regular file";
    else if (st.st_uid != ::geteuid()) why = path + " is taken by a file of user " + std::to_string(st.st_uid);
    else if (st.st_nlink != 1) why = path + " is taken by a file with " + std::to_string(st.st_nlink) + " links";
  }
  ::close(dir_fd);
  return why;
}

// A name beside `path` that nobody can have taken first: random, made with O_EXCL, then freed for
// the writer's rename.
std::string unique_beside(const std::string& path) {
  const auto [dir, name] = net::split_path(path);
  const int dir_fd = net::open_safe_directory(dir, nullptr);
  if (dir_fd < 0) return path;
  const size_t dot = name.rfind('.');
  const bool has_extension = dot != std::string::npos && dot > 0;
  std::string unique;
  const int fd = net::create_unique_file_at(dir_fd, (has_extension ? name.substr(0, dot) : name) + ".",
                                            has_extension ? name.substr(dot) : "", 0600, &unique);
  if (fd >= 0) {
    ::close(fd);
    ::unlinkat(dir_fd, unique.c_str(), 0);
  }
  ::close(dir_fd);
  return fd < 0 ? path : (dir == "/" ? "/" : dir + "/") + unique;
}

// `path`, or when another user took its name first, a unique name beside it (said in *note).
std::string unsquatted(const std::string& pattern, const std::string& path, std::string* note) {
  const std::string why = squatter(path);
  if (why.empty()) return path;
  const std::string own = unique_beside(path);
  *note = "SIEVE_STATS_FILE=" + pattern + ": " + why + "; this process writes " + own + " instead";
  return own;
}

}  // namespace

std::string choose_stats_path(const std::string& pattern, int pid, const std::string& host,
                              std::unique_ptr<StatsFileClaim>* claim, std::string* note, const std::string& previous) {
  const std::string path = expand_stats_path(pattern, pid, host);
  if (pattern.find("%p") != std::string::npos) return unsquatted(pattern, path, note);
  std::string error;
  *claim = StatsFileClaim::take(path, &error);
  std::string why = error.empty() ? path + " is written by another live process" : error;
  if (*claim) {
    // Unclaimed, but a file there is a finished process's final totals (a scraper may not have read
    // them yet): never written over, unless this process wrote it itself.
    struct stat st {};
    const std::string taken = path == previous ? "" : squatter(path);
    if (path == previous || (taken.empty() && ::lstat(path.c_str(), &st) != 0)) return path;
    claim->reset();
    why = taken.empty() ? path + " holds the final totals of an earlier process" : taken;
  }
  const std::string own = with_pid(path, pid);
  *note = "SIEVE_STATS_FILE=" + pattern + ": " + why + "; this process writes " + own +
          " instead (put %p in the name to give every process its own file)";
  std::string squatted;
  const std::string chosen = unsquatted(pattern, own, &squatted);
  if (!squatted.empty()) *note += "; " + squatted.substr(squatted.find(": ") + 2);
  return chosen;
}

StatsWriter::StatsWriter(std::string path, config::StatsFileFormat format, int64_t interval_s, Source source,
                         unsigned mode)
    : path_(std::move(path)), format_(format), source_(std::move(source)), mode_(mode & 0644) {
  // The directory is opened once, checked, and held: a symlink put on its path later changes
  // nothing, so the periodic rewrite can never land in another user's directory.
  dir_fd_ = net::open_safe_directory(net::split_path(path_).first, &dir_problem_);
  if (interval_s > 0) thread_ = std::thread([this, interval_s] { run(interval_s); });
}

StatsWriter::~StatsWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  write_now();
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void StatsWriter::run(int64_t interval_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(interval_s), [this] { return stopping_; })) {
    lock.unlock();
    write_now();
    lock.lock();
  }
}

bool StatsWriter::write_now(std::string* error) {
  std::lock_guard<std::mutex> serialised(write_mutex_);
  Snapshot snapshot = source_();
  std::string text = format_ == config::StatsFileFormat::kJson ? to_json(snapshot) : to_prometheus(snapshot);
  // A temporary file of this write's own (another process, or this writer's periodic thread, may be
  // writing the same path), renamed over the path: readers see a whole file, old or new. Its name
  // does not end in .prom, so a textfile collector never reads it half written.
  if (dir_fd_ < 0) {
    if (error) *error = "cannot write stats file " + path_ + ": " + dir_problem_;
    return false;
  }
  const std::string name = net::split_path(path_).second;
  std::string tmp;
  // Created with O_EXCL, mode 0600; wider only as SIEVE_STATS_MODE asks (a scraper running as
  // another user). renameat replaces a symlink at the name, never writes through it.
  const int fd = net::create_unique_file_at(dir_fd_, name + ".tmp.", "", 0600, &tmp);
  if (fd >= 0 && mode_ != 0600) ::fchmod(fd, mode_);
  std::FILE* f = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
  if (fd >= 0 && !f) ::close(fd);
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) ok = false;
  if (ok && ::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) ok = false;
  if (!ok) {
    if (error) *error = "cannot write stats file " + path_ + ": " + std::strerror(errno);
    if (fd >= 0) ::unlinkat(dir_fd_, tmp.c_str(), 0);
  }
  return ok;
}

}  // namespace sieve::plugin
