// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/node.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "compress/compact_host.h"
#include "compress/tile_layout.h"
#include "tools/sieve-bench/arena.h"
#include "tools/sieve-bench/gradients.h"
#include "tools/sieve-bench/plugin_link.h"
#include "tools/sieve-bench/ring_allreduce.h"

namespace sieve::bench {

bool send_message(int fd, const std::string& text) {
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

std::string receive_message(int fd, int timeout_ms, std::string* error) {
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, timeout_ms);
  if (ready <= 0) {
    *error = ready == 0 ? "timed out" : std::string("poll: ") + std::strerror(errno);
    return "";
  }
  char buffer[4096];
  const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
  if (n <= 0) {
    *error = n == 0 ? "connection closed" : std::string("recv: ") + std::strerror(errno);
    return "";
  }
  error->clear();
  return std::string(buffer, static_cast<size_t>(n));
}

namespace {

using Clock = std::chrono::steady_clock;

struct KernelCounters {
  uint64_t tx = 0, rx = 0;
  bool valid = false;
};

// /proc/self/net/dev follows the calling thread's network namespace (unlike /sys/class/net).
KernelCounters read_kernel_counters(const std::string& ifname) {
  KernelCounters counters;
  std::ifstream in("/proc/self/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != ifname) continue;
    std::istringstream fields(line.substr(colon + 1));
    uint64_t v[9] = {};
    for (uint64_t& x : v) fields >> x;
    counters.rx = v[0];
    counters.tx = v[8];
    counters.valid = static_cast<bool>(fields);
  }
  return counters;
}

class Node {
 public:
  Node(const NodeJob& job, int fd) : job_(job), fd_(fd), elem_(dtype_size(job.dtype)) {
    deadline_ = Clock::now() + std::chrono::seconds(job.timeout_s);
  }

  std::string run() {
    std::string error = enter_namespace();
    if (!error.empty()) return error;
    for (const auto& [name, value] : job_.environment) setenv(name.c_str(), value.c_str(), 1);
    // Each node is a rank of the emulated job, as a launcher would say (torchrun's RANK): its stats
    // file's series carry rank="N", so the nodes of one host stay apart without a pid label.
    setenv("RANK", std::to_string(job_.rank).c_str(), 1);
    link_ = PluginLink::open(job_.library, &error);
    if (!link_) return error;
    if (!send_message(fd_, "listen " + link_->handle().to_hex())) return "orchestrator gone";
    const std::string peer = expect("peer ");
    if (peer.empty()) return error_;
    tools::NetHandle next;
    if (!tools::NetHandle::from_hex(peer, &next)) return "bad handle from the orchestrator";
    error = link_->connect_ring(next, deadline_);
    if (!error.empty()) return error;
    error = prepare_buffers();
    if (!error.empty()) return error;
    if (!send_message(fd_, "ready")) return "orchestrator gone";
    for (int iter = 0; iter < job_.warmup + job_.iterations; ++iter) {
      if (expect("go ").empty()) return error_;
      if (iter == job_.warmup) snapshot(&before_);
      error = iteration(iter);
      if (!error.empty()) return error;
    }
    snapshot(&after_);
    std::ostringstream stats;
    stats << "stats " << (after_.has_plugin ? 1 : 0) << ' ' << after_.logical - before_.logical << ' '
          << after_.wire - before_.wire << ' ' << (after_.kernel.valid ? 1 : 0) << ' '
          << after_.kernel.tx - before_.kernel.tx << ' ' << after_.kernel.rx - before_.kernel.rx << ' '
          << link_->device_name();
    if (!send_message(fd_, stats.str())) return "orchestrator gone";
    if (expect("close").empty()) return error_;
    link_->close_receiving();
    if (!send_message(fd_, "closed")) return "orchestrator gone";
    expect("bye");
    return "";
  }

 private:
  struct Snapshot {
    bool has_plugin = false;
    uint64_t logical = 0, wire = 0;
    KernelCounters kernel;
  };

  std::string enter_namespace() {
    if (job_.netns.empty()) return "";
    const std::string path = "/var/run/netns/" + job_.netns;
    const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) return "cannot open " + path + ": " + std::strerror(errno);
    const int result = ::setns(ns, CLONE_NEWNET);
    const int saved = errno;
    ::close(ns);
    if (result != 0) return "setns " + path + ": " + std::strerror(saved);
    return "";
  }

  // Waits for a message starting with `prefix`; returns the rest (or "" with error_ set).
  std::string expect(const std::string& prefix) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    std::string message = receive_message(fd_, static_cast<int>(std::max<long>(0, left)), &error_);
    if (message.empty()) {
      error_ = "waiting for '" + prefix + "' from the orchestrator: " + error_;
      return "";
    }
    if (message.compare(0, prefix.size(), prefix) != 0) {
      error_ = "expected '" + prefix + "', got '" + message + "'";
      return "";
    }
    return message.size() > prefix.size() ? message.substr(prefix.size()) : std::string(" ");
  }

  std::string prepare_buffers() {
    if (job_.fsdp != nullptr) return prepare_fsdp();
    size_t total = 0;
    for (const Bucket& bucket : *job_.buckets) {
      bucket_first_.push_back(total);
      total += bucket.elements;
    }
    gradients_ = std::make_unique<Arena>(total * elem_);
    if (!gradients_->data) return "out of memory for " + std::to_string(total * elem_) + " bytes of gradients";
    char* ring_memory = gradients_->data.get();
    size_t ring_bytes = total * elem_;
    if (job_.mode == Mode::Compacted) {
      // Each bucket's mask as the proxy's gather and scatter kernels read it (compress/tile_layout.h).
      size_t kept_total = 0;
      for (size_t b = 0; b < job_.buckets->size(); ++b) {
        const BucketMask& mask = (*job_.masks)[b];
        layouts_.push_back(sieve::compress::build_tile_layout(
            sieve::compress::Mask::from_bytes(mask.data(), mask.size()), 0, mask.size()));
        compact_first_.push_back(kept_total);
        kept_total += layouts_.back().nnz;
      }
      compact_ = std::make_unique<Arena>(kept_total * elem_);
      if (!compact_->data) return "out of memory for the compacted buffer";
      ring_memory = compact_->data.get();
      ring_bytes = kept_total * elem_;
    }
    std::string error = prepare_ring();
    if (error.empty()) error = link_->register_region(ring_memory, ring_bytes);
    return error;
  }

  // The ring's options and its scratch (registered: reduce-scatter chunks land there).
  std::string prepare_ring() {
    options_.chunk_bytes = job_.chunk_bytes;
    options_.max_inflight = job_.inflight;
    options_.deadline = deadline_;
    scratch_ = std::make_unique<Arena>(scratch_bytes(options_));
    if (!scratch_->data) return "out of memory for the scratch buffer";
    return link_->register_region(scratch_->data.get(), scratch_->size);
  }

  // --fsdp: the step's parameter, gradient and compact buffers instead of DDP's buckets.
  std::string prepare_fsdp() {
    fsdp_ = std::make_unique<FsdpStep>(*job_.fsdp, job_.mode, job_.rank, job_.dtype);
    std::string error = fsdp_->allocate();
    if (error.empty()) error = prepare_ring();
    for (const auto& [data, bytes] : fsdp_->ring_regions()) {
      if (error.empty()) error = link_->register_region(data, bytes);
    }
    return error;
  }

  // Every node starts its clock together, as Gloo's runs do after dist.barrier(): otherwise the
  // slowest node's time would include how much later the others finished filling their buffers.
  std::string start_together() {
    if (!send_message(fd_, "filled")) return "orchestrator gone";
    return expect("start").empty() ? error_ : "";
  }

  std::string report_done(int iter, Clock::duration elapsed, size_t bytes, Clock::duration compaction) {
    std::ostringstream done;
    done << "done " << iter << ' ' << std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count() << ' '
         << bytes << ' ' << std::chrono::duration_cast<std::chrono::nanoseconds>(compaction).count();
    return send_message(fd_, done.str()) ? "" : "orchestrator gone";
  }

  std::string fsdp_iteration(int iter) {
    fsdp_->fill(static_cast<uint64_t>(iter));
    std::string error = start_together();
    if (!error.empty()) return error;
    const auto start = Clock::now();
    const FsdpStepResult result = fsdp_->run(*link_, scratch_->data.get(), options_);
    const auto elapsed = Clock::now() - start;
    if (!result.error.empty()) return result.error;
    const std::string wrong = fsdp_->check(static_cast<uint64_t>(iter));
    if (!wrong.empty()) return "WRONG RESULT in iteration " + std::to_string(iter) + ", " + wrong;
    return report_done(iter, elapsed, result.bytes_sent, result.compaction);
  }

  const uint8_t* keep_of(size_t bucket) const {
    return job_.mode == Mode::Dense ? nullptr : (*job_.masks)[bucket].data();
  }

  // The bucket's kept elements into its part of the compact buffer, with the CPU twin of the proxy's
  // kernels (compress/compact_host.h): one thread, since the nodes share the machine's cores.
  void gather(size_t b) {
    const sieve::compress::TileLayout& layout = layouts_[b];
    sieve::compress::gather_host({layout.bits.data(), layout.tile_base.data(), layout.count}, 0, layout.count, elem_,
                                 gradients_->data.get() + bucket_first_[b] * elem_,
                                 compact_->data.get() + compact_first_[b] * elem_);
  }

  // Exact zeros wherever the mask prunes, the reduced values where it keeps.
  void scatter(size_t b) {
    const sieve::compress::TileLayout& layout = layouts_[b];
    sieve::compress::scatter_host({layout.bits.data(), layout.tile_base.data(), layout.count}, 0, layout.count, elem_,
                                  compact_->data.get() + compact_first_[b] * elem_,
                                  gradients_->data.get() + bucket_first_[b] * elem_);
  }

  std::string iteration(int iter) {
    if (fsdp_) return fsdp_iteration(iter);
    const GradientPattern pattern(job_.nranks, static_cast<uint64_t>(iter), job_.dtype);
    const auto& buckets = *job_.buckets;
    for (size_t b = 0; b < buckets.size(); ++b) {
      fill_gradients(pattern, job_.rank, bucket_first_[b], buckets[b].elements, job_.dtype, keep_of(b),
                     gradients_->data.get() + bucket_first_[b] * elem_);
    }
    std::string error = start_together();
    if (!error.empty()) return error;
    size_t bytes = 0;
    Clock::duration compaction{};  // gather + scatter: what the proxy's GPU kernels would do
    const auto start = Clock::now();
    for (size_t b = 0; b < buckets.size(); ++b) {
      RingResult result;
      if (job_.mode == Mode::Compacted) {
        auto t0 = Clock::now();
        gather(b);
        compaction += Clock::now() - t0;
        result = ring_allreduce(*link_, job_.rank, job_.nranks, compact_->data.get() + compact_first_[b] * elem_,
                                layouts_[b].nnz, job_.dtype, scratch_->data.get(), options_);
        t0 = Clock::now();
        if (result.error.empty()) scatter(b);
        compaction += Clock::now() - t0;
      } else {
        result = ring_allreduce(*link_, job_.rank, job_.nranks, gradients_->data.get() + bucket_first_[b] * elem_,
                                buckets[b].elements, job_.dtype, scratch_->data.get(), options_);
      }
      if (!result.error.empty()) return "bucket " + std::to_string(b) + ": " + result.error;
      bytes += result.bytes_sent;
    }
    const auto elapsed = Clock::now() - start;
    for (size_t b = 0; b < buckets.size(); ++b) {
      const std::string wrong = check_sums(pattern, bucket_first_[b], buckets[b].elements, job_.dtype, keep_of(b),
                                           gradients_->data.get() + bucket_first_[b] * elem_);
      if (!wrong.empty()) {
        return "WRONG RESULT in iteration " + std::to_string(iter) + ", bucket " + std::to_string(b) + ": " + wrong;
      }
    }
    return report_done(iter, elapsed, bytes, compaction);
  }

  void snapshot(Snapshot* s) const {
    s->has_plugin = link_->plugin_counters(&s->logical, &s->wire);
    s->kernel = read_kernel_counters(job_.ifname);
  }

  const NodeJob& job_;
  int fd_;
  size_t elem_;
  Clock::time_point deadline_;
  std::string error_;
  std::unique_ptr<PluginLink> link_;
  std::unique_ptr<Arena> gradients_, compact_, scratch_;
  std::unique_ptr<FsdpStep> fsdp_;  // --fsdp only
  std::vector<size_t> bucket_first_, compact_first_;
  std::vector<sieve::compress::TileLayout> layouts_;  // per bucket, in Compacted mode
  RingOptions options_;
  Snapshot before_, after_;
};

}  // namespace

int run_node(const NodeJob& job, int control_fd) {
  // A node never outlives the orchestrator, nor its own deadline (plus a grace for the report).
  // The death signal covers an orchestrator that dies from now on; one that died between fork and
  // here has already left this node to another parent.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != job.coordinator) {
    std::fprintf(stderr, "sieve-bench: node %d: the orchestrator (pid %d) exited before the node started; stopping\n",
                 job.rank, static_cast<int>(job.coordinator));
    return 3;
  }
  alarm(static_cast<unsigned>(job.timeout_s + 10));
  Node node(job, control_fd);
  const std::string error = node.run();
  if (error.empty()) return 0;
  send_message(control_fd, "fail " + error);
  return 1;
}

}  // namespace sieve::bench
