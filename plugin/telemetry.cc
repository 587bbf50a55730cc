#include "plugin/telemetry.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "compress/json.h"

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
  const char* name;
  uint64_t TrafficCounters::*member;
  const char* help;
};

const Field kFields[] = {
    {"bytes_logical_sent", &TrafficCounters::bytes_logical_sent, "Bytes NCCL asked to send"},
    {"bytes_wire_sent", &TrafficCounters::bytes_wire_sent, "Bytes written to the sockets, framing included"},
    {"bytes_logical_received", &TrafficCounters::bytes_logical_received, "Bytes delivered to NCCL"},
    {"bytes_wire_received", &TrafficCounters::bytes_wire_received, "Bytes read from the sockets"},
    {"messages_sent", &TrafficCounters::messages_sent, "Messages sent"},
    {"messages_received", &TrafficCounters::messages_received, "Messages received"},
    {"busy_ns", &TrafficCounters::busy_ns, "Nanoseconds with at least one request in flight"},
};

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

std::string to_json(const Snapshot& s) {
  char head[512];
  std::snprintf(head, sizeof(head),
                "{\n  \"unix_ms\": %" PRIu64 ",\n  \"pid\": %d,\n  \"host\": %s,\n"
                "  \"collectives_dense\": %" PRIu64 ",\n  \"collectives_compacted\": %" PRIu64
                ",\n  \"mask_violations\": %" PRIu64 ",\n  \"connections_rejected\": %" PRIu64 ",\n",
                s.unix_ms, s.pid, compress::json::quote(s.host).c_str(), s.collectives_dense, s.collectives_compacted,
                s.mask_violations, s.connections_rejected);
  std::string out = head;
  out += "  \"totals\": " + counters_json(s.totals) + ",\n  \"devices\": [";
  auto devices = per_device(s);
  for (size_t i = 0; i < devices.size(); ++i)
    out += std::string(i ? ",\n" : "\n") + "    {\"device\": " + compress::json::quote(devices[i].device) +
           ", \"counters\": " + counters_json(devices[i].counters) + "}";
  out += devices.empty() ? "],\n" : "\n  ],\n";
  out += "  \"peers\": [";
  for (size_t i = 0; i < s.peers.size(); ++i)
    out += std::string(i ? ",\n" : "\n") + "    {\"device\": " + compress::json::quote(s.peers[i].device) +
           ", \"peer\": " + compress::json::quote(s.peers[i].peer) + ", \"counters\": " + counters_json(s.peers[i].counters) +
           "}";
  out += s.peers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string to_prometheus(const Snapshot& s) {
  std::string out;
  char line[512];
  const std::string host = label_value(s.host);
  for (const auto& f : kFields) {
    std::snprintf(line, sizeof(line), "# HELP sieve_%s_total %s\n# TYPE sieve_%s_total counter\n", f.name, f.help,
                  f.name);
    out += line;
    std::snprintf(line, sizeof(line), "sieve_%s_total{host=\"%s\",pid=\"%d\"} %" PRIu64 "\n", f.name, host.c_str(),
                  s.pid, s.totals.*f.member);
    out += line;
    for (const auto& p : s.peers) {
      std::snprintf(line, sizeof(line), "sieve_%s_total{host=\"%s\",pid=\"%d\",device=\"%s\",peer=\"%s\"} %" PRIu64 "\n",
                    f.name, host.c_str(), s.pid, label_value(p.device).c_str(), label_value(p.peer).c_str(),
                    p.counters.*f.member);
      out += line;
    }
  }
  const struct {
    const char* name;
    uint64_t value;
    const char* help;
  } process_counters[] = {
      {"collectives_dense", s.collectives_dense, "Collectives the proxy passed through dense"},
      {"collectives_compacted", s.collectives_compacted, "Collectives the proxy ran on a compacted buffer"},
      {"mask_violations", s.mask_violations, "Nonzero values found outside a mask"},
      {"connections_rejected", s.connections_rejected, "Connections dropped for bad magic, nonce or token"},
  };
  for (const auto& c : process_counters) {
    std::snprintf(line, sizeof(line),
                  "# HELP sieve_%s_total %s\n# TYPE sieve_%s_total counter\nsieve_%s_total{host=\"%s\",pid=\"%d\"} "
                  "%" PRIu64 "\n",
                  c.name, c.help, c.name, c.name, host.c_str(), s.pid, c.value);
    out += line;
  }
  return out;
}

std::string expand_stats_path(const std::string& pattern, int pid, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char k = pattern[i + 1];
      if (k == 'p') { out += std::to_string(pid); ++i; continue; }
      if (k == 'h') { out += host; ++i; continue; }
      if (k == '%') { out += '%'; ++i; continue; }
    }
    out += pattern[i];
  }
  return out;
}

StatsWriter::StatsWriter(std::string path, StatsFormat format, int64_t interval_s, Source source)
    : path_(std::move(path)), format_(format), source_(std::move(source)) {
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
  Snapshot snapshot = source_();
  std::string text = format_ == StatsFormat::Json ? to_json(snapshot) : to_prometheus(snapshot);
  std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) ok = false;
  if (ok && std::rename(tmp.c_str(), path_.c_str()) != 0) ok = false;
  if (!ok) {
    if (error) *error = "cannot write stats file " + path_ + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
  }
  return ok;
}

}  // namespace sieve::plugin
