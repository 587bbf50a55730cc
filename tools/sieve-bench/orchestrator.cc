// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/orchestrator.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "tools/common/install_layout.h"
#include "tools/common/netlab.h"
#include "tools/common/stop_signal.h"
#include "tools/sieve-bench/gloo_peer.h"
#include "tools/sieve-bench/lab.h"
#include "tools/sieve-bench/masks_file.h"
#include "tools/sieve-bench/node.h"

namespace sieve::bench {

namespace {

using Clock = std::chrono::steady_clock;

bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// What a node does before it sends the message starting with `prefix`, for a timeout's message.
std::string step_name(const std::string& prefix) {
  if (prefix == "listen ") return "to start listening";
  if (prefix == "ready") return "to connect to their ring neighbours";
  if (prefix == "filled") return "to fill their buffers";
  if (prefix == "done ") return "to finish the all-reduce";
  if (prefix == "stats ") return "to report their counters";
  if (prefix == "closed") return "to close their connections";
  return "to answer";
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string last_words;  // a "fail ..." message, if it sent one
};

class Fleet {
 public:
  ~Fleet() { kill_all(); }
  std::vector<Child> children;

  void kill_all() {
    for (Child& c : children) {
      if (c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      }
      if (c.fd >= 0) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
  }

  // Waits until every node has sent a message starting with `prefix`. On a failure returns false
  // with *error naming the node and what it said (or how it ended).
  bool gather(const std::string& prefix, Clock::time_point deadline, std::vector<std::string>* out,
              std::string* error) {
    out->assign(children.size(), "");
    std::vector<bool> have(children.size(), false);
    size_t pending = children.size();
    while (pending > 0) {
      if (tools::stop_signal()) return *error = "interrupted by " + tools::stop_signal_name(), false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string late;
        for (size_t i = 0; i < children.size(); ++i) {
          if (!have[i]) late += (late.empty() ? "" : ", ") + std::to_string(i);
        }
        return *error = "timed out waiting for node(s) " + late + " " + step_name(prefix), false;
      }
      // Only nodes that have not answered: an answered one may already have sent its next message.
      std::vector<pollfd> fds;
      for (size_t i = 0; i < children.size(); ++i) fds.push_back({have[i] ? -1 : children[i].fd, POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(left, 200)));
      if (ready < 0 && errno != EINTR) return *error = std::string("poll: ") + std::strerror(errno), false;
      for (size_t i = 0; i < children.size() && ready > 0; ++i) {
        if (have[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        std::string why;
        std::string message = receive_message(children[i].fd, 0, &why);
        if (message.empty()) return *error = "node " + std::to_string(i) + " " + describe_end(i, why), false;
        if (message.compare(0, 5, "fail ") == 0) {
          return *error = "node " + std::to_string(i) + ": " + message.substr(5), false;
        }
        if (have[i] || message.compare(0, prefix.size(), prefix) != 0) {
          return *error = "node " + std::to_string(i) + " said '" + message + "' out of turn", false;
        }
        (*out)[i] = message.substr(prefix.size());
        have[i] = true;
        --pending;
      }
    }
    return true;
  }

  bool broadcast(const std::string& message) {
    bool ok = true;
    for (const Child& c : children) ok = send_message(c.fd, message) && ok;
    return ok;
  }

  bool send_to(size_t i, const std::string& message) { return send_message(children[i].fd, message); }

  // After "bye": wait a little for clean exits, then make sure.
  void reap(Clock::time_point deadline) {
    for (Child& c : children) {
      while (c.pid > 0 && Clock::now() < deadline) {
        if (::waitpid(c.pid, nullptr, WNOHANG) == c.pid) c.pid = -1;
        else usleep(10000);
      }
    }
    kill_all();
  }

 private:
  std::string describe_end(size_t i, const std::string& why) {
    int status = 0;
    usleep(100000);  // let it finish dying so the status says how
    if (children[i].pid > 0 && ::waitpid(children[i].pid, &status, WNOHANG) == children[i].pid) {
      children[i].pid = -1;
      if (WIFSIGNALED(status))
        return std::string("was killed by signal ") + strsignal(WTERMSIG(status)) + " (" + why + ")";
      return "exited with status " + std::to_string(WEXITSTATUS(status)) + " (" + why + ")";
    }
    return "went silent (" + why + ")";
  }
};

struct Workload {
  std::string display_name;
  int64_t parameters = 0;
  std::vector<Bucket> buckets;
  std::vector<BucketMask> masks;
  FsdpWorkload fsdp;  // --fsdp: the groups and their masks instead of the buckets
  double kept = 1.0;  // of the model's elements
  // Of the elements the dense mode moves (FSDP's padding included): what the compacted mode's rings
  // carry, and how many of the codec mode's elements are nonzero.
  double compacted_share = 1.0, nonzero_share = 1.0;
};

double ideal_speedup(Mode mode, const Workload& w, DType dtype) {
  switch (mode) {
    case Mode::Dense: return 1.0;
    case Mode::Compacted: return 1.0 / w.compacted_share;
    // The codec's bitmap costs one bit per element: 1/32 of fp32, 1/16 of bf16.
    case Mode::Codec: return 1.0 / (w.nonzero_share + 1.0 / (8.0 * static_cast<double>(dtype_size(dtype))));
  }
  return 0;
}

bool build_workload(const Options& o, Workload* w, std::string* error) {
  const size_t elem = dtype_size(o.dtype);
  Model model;
  std::vector<std::vector<uint8_t>> keep;  // per parameter (FSDP cuts these up)
  if (!o.masks_file.empty()) {
    MaskedModel masked;
    const std::optional<Model> known = o.model_given ? make_model(o.model) : std::nullopt;
    if (!load_masked_model(o.masks_file, &masked, error, known ? &*known : nullptr)) return false;
    model = std::move(masked.model);
    keep = std::move(masked.keep);
  } else {
    model = *make_model(o.model);
    if (o.fsdp) keep = prune_parameters(model, o.prune);
  }
  w->display_name = model.display_name;
  w->parameters = model.elements();
  if (o.fsdp) {
    w->fsdp = make_fsdp_workload(model, o.nodes, keep);
    const double buffer = static_cast<double>(w->fsdp.buffer_elements());
    w->kept = w->parameters > 0 ? static_cast<double>(w->fsdp.kept_elements()) / static_cast<double>(w->parameters) : 1;
    w->compacted_share = static_cast<double>(w->fsdp.compacted_elements()) / buffer;
    w->nonzero_share = static_cast<double>(w->fsdp.kept_elements()) / buffer;
    return true;
  }
  w->buckets = ddp_buckets(model, elem);
  w->masks = keep.empty() ? prune(model, w->buckets, o.prune) : bucket_masks(w->buckets, keep);
  w->kept = w->compacted_share = w->nonzero_share = kept_fraction(w->masks);
  return true;
}

// Starts the nodes of one mode, paces their iterations and gathers their numbers into `result`;
// returns "" or what failed, naming the node. The Fleet kills and reaps the nodes on every path.
std::string run_mode(const NodeJob& base, const Options& o, const Lab* lab, Clock::time_point deadline,
                     Progress& progress, ModeResult* result) {
  const int rounds = o.warmup + o.iterations;
  Fleet fleet;
  std::string failure;
  const pid_t coordinator = getpid();
  for (int rank = 0; rank < o.nodes && failure.empty(); ++rank) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
      failure = std::string("socketpair: ") + std::strerror(errno);
      break;
    }
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      failure = std::string("fork: ") + std::strerror(errno);
      ::close(pair[0]);
      ::close(pair[1]);
      break;
    }
    if (pid == 0) {
      for (const Child& c : fleet.children) ::close(c.fd);
      ::close(pair[0]);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      NodeJob job = base;
      job.rank = rank;
      job.coordinator = coordinator;
      job.netns = lab != nullptr ? lab->ns(rank) : "";
      _exit(run_node(job, pair[1]));
    }
    ::close(pair[1]);
    fleet.children.push_back({pid, pair[0], ""});
  }
  std::vector<std::string> answers;
  if (failure.empty() && fleet.gather("listen ", deadline, &answers, &failure)) {
    for (int rank = 0; rank < o.nodes; ++rank) fleet.send_to(rank, "peer " + answers[(rank + 1) % o.nodes]);
    if (fleet.gather("ready", deadline, &answers, &failure)) {
      int finished = 0;
      for (int iter = 0; iter < rounds && failure.empty(); ++iter) {
        progress.update(result->name, iter, rounds);
        fleet.broadcast("go " + std::to_string(iter));
        if (!fleet.gather("filled", deadline, &answers, &failure)) break;
        fleet.broadcast("start");
        if (!fleet.gather("done ", deadline, &answers, &failure)) break;
        double slowest = 0, bytes = 0, compaction = 0;
        for (const std::string& a : answers) {
          std::istringstream in(a);
          long it = 0;
          double ns = 0, sent = 0, compaction_ns = 0;
          in >> it >> ns >> sent >> compaction_ns;
          slowest = std::max(slowest, ns * 1e-9);
          compaction = std::max(compaction, compaction_ns * 1e-9);
          bytes += sent;
        }
        if (iter >= o.warmup) {
          result->seconds.push_back(slowest);
          result->compaction_seconds.push_back(compaction);
          result->logical_bytes = bytes / o.nodes;
        }
        ++finished;
      }
      progress.update(result->name, finished, rounds);  // what finished, never more
      if (failure.empty() && fleet.gather("stats ", deadline, &answers, &failure)) {
        double wire = 0, tx = 0;
        bool has_plugin = true, has_kernel = lab != nullptr;
        for (size_t i = 0; i < answers.size(); ++i) {
          std::istringstream in(answers[i]);
          int plugin_ok = 0, kernel_ok = 0;
          double w = 0, k_tx = 0, k_rx = 0, logical = 0;
          in >> plugin_ok >> logical >> w >> kernel_ok >> k_tx >> k_rx;
          std::string device;
          std::getline(in, device);
          if (i == 0 && device.size() > 1) result->device = device.substr(1);
          has_plugin = has_plugin && plugin_ok;
          has_kernel = has_kernel && kernel_ok;
          wire += w;
          tx += k_tx;
        }
        const double per = static_cast<double>(o.nodes) * o.iterations;
        result->has_plugin_wire = has_plugin;
        result->plugin_wire_bytes = wire / per;
        result->has_kernel = has_kernel;
        result->kernel_tx_bytes = tx / per;
        // Receivers close first everywhere, then senders: a clean end, no peer seen vanishing.
        fleet.broadcast("close");
        if (fleet.gather("closed", deadline, &answers, &failure)) {
          fleet.broadcast("bye");
          fleet.reap(Clock::now() + std::chrono::seconds(5));
          result->ok = true;
        }
      }
    }
  }
  return failure;
}

// What the run will move, said in the report before anything runs: the pruning, the workload
// built from the model or the masks file, and the plugin it loads (*library). 0, or the exit status.
int prepare_workload(const Options& o, const tools::InstallLayout& layout, RunReport* report, Workload* work,
                     std::string* library, double* moved_bytes) {
  std::ostringstream prune;
  if (!o.masks_file.empty()) prune << "masks from " << o.masks_file;
  else if (o.prune.kind == PruneKind::None) prune << "none";
  else
    prune << (o.prune.kind == PruneKind::Channel ? "channel-structured" : "unstructured") << ", density "
          << o.prune.density;
  report->prune = prune.str();
  std::string error;
  if (!build_workload(o, work, &error)) {
    report->failure = error;
    return 2;
  }
  *library = o.plugin.empty() ? layout.plugin() : o.plugin;
  if (!file_exists(*library)) {
    report->failure = o.plugin.empty() ? std::string("libnccl-net-sieve.so is not installed beside sieve-bench (") +
                                             *library + " does not exist): install Sieve, or pass --plugin PATH"
                                       : "--plugin: not found at " + *library;
    return 2;
  }
  report->model = work->display_name;
  report->parameters = work->parameters;
  report->buckets = work->buckets.size();
  report->kept_fraction = work->kept;
  *moved_bytes = report->model_bytes();
  if (o.fsdp) {
    report->groups = work->fsdp.groups.size();
    report->groups_compacted = work->fsdp.groups_compacted();
    report->compacted_share = work->compacted_share;
    *moved_bytes = static_cast<double>(work->fsdp.buffer_elements() * dtype_size(o.dtype));
    report->padding_fraction =
        1.0 - static_cast<double>(work->parameters) / static_cast<double>(work->fsdp.buffer_elements());
  }
  return 0;
}

// The namespace lab as root, unless --loopback; where namespaces cannot be made (a container
// without CAP_NET_ADMIN) a run that needs nothing of the lab goes to loopback and says so.
// 0 with *use_lab set, or the exit status.
int choose_lab(const Options& o, RunReport* report, bool* use_lab) {
  const bool impaired = !(o.delay.empty() && o.jitter.empty() && o.loss.empty() && o.reorder.empty());
  const bool needs_lab = impaired || o.gloo;
  const char* needer = impaired ? "--delay/--jitter/--loss/--reorder need" : "--gloo needs";
  *use_lab = geteuid() == 0 && !o.loopback;
  if (!*use_lab && needs_lab) {
    report->failure = std::string(needer) + " the namespace lab, which needs root";
    return 2;
  }
  if (*use_lab) {
    const std::string why_not = tools::NetLab::unavailable_reason();
    if (!why_not.empty() && needs_lab) {
      report->failure = std::string(needer) + " the namespace lab (" + why_not + ")";
      return 2;
    }
    if (!why_not.empty()) {
      std::fprintf(stderr, "sieve-bench: no namespace lab (%s): the nodes run on loopback, as with --loopback\n",
                   why_not.c_str());
      *use_lab = false;
    }
  }
  return 0;
}

// Brings the lab up (use_lab) or shapes loopback, says which link the nodes share in the report, and
// adds the plugin's variables for it to *environment. 0, or the exit status.
int set_up_link(const Options& o, bool use_lab, const std::string& netlab, Lab& lab, RunReport* report,
                std::vector<std::pair<std::string, std::string>>* environment) {
  environment->emplace_back("SIEVE_TRANSPORT", tools::kEmulatedLinkTransport);
  if (!use_lab) {
    environment->emplace_back("SIEVE_SOCKET_IFNAME", "=lo");
    report->link = "loopback";
    if (!o.rate.empty()) {
      environment->emplace_back("SIEVE_RATE_LIMIT_MBPS",
                                std::to_string(static_cast<long>(rate_bits_per_second(o.rate) / 1e6)));
      report->link += " shaped to " + o.rate + " per node by the plugin";
    }
    return 0;
  }
  if (!file_exists(netlab)) {
    report->failure = "--netlab: script not found at " + netlab + " (pass --netlab PATH, or --loopback)";
    return 2;
  }
  if (!lab.up(o, o.nodes)) {
    report->failure = "could not bring up the namespace lab (" + netlab + " up failed; its reason is above)";
    return 2;
  }
  std::ostringstream link;
  link << "network namespaces on a " << (o.rate.empty() ? "unshaped" : o.rate) << " switch";
  if (!o.delay.empty()) link << ", delay " << o.delay;
  if (!o.jitter.empty()) link << " +- " << o.jitter;
  if (!o.loss.empty()) link << ", loss " << o.loss;
  if (!o.reorder.empty()) link << ", reorder " << o.reorder;
  report->link = link.str();
  environment->emplace_back("SIEVE_SOCKET_IFNAME", "=eth0");
  return 0;
}

// What every mode's run shares.
struct RunSetup {
  const Workload* work = nullptr;
  std::string library;
  std::vector<std::pair<std::string, std::string>> environment;
  bool use_lab = false;
  Lab* lab = nullptr;
  Clock::time_point deadline;
  int budget_s = 0;
};

// Each mode of --modes in turn, its result in the report; the first that fails ends the run. 0, or
// the exit status.
int run_modes(const Options& o, const RunSetup& run, Progress& progress, RunReport* report) {
  const Workload& work = *run.work;
  for (Mode mode : o.modes) {
    ModeResult result;
    result.name = mode_name(mode);
    result.ideal_speedup = ideal_speedup(mode, work, o.dtype);
    NodeJob job;
    job.nranks = o.nodes;
    job.mode = mode;
    job.dtype = o.dtype;
    job.buckets = &work.buckets;
    job.masks = mode == Mode::Dense ? nullptr : &work.masks;
    job.fsdp = o.fsdp ? &work.fsdp : nullptr;
    job.ifname = run.use_lab ? "eth0" : "lo";
    job.library = run.library;
    job.environment = run.environment;
    // Dense and compacted measure the plain transport; codec turns the zero elision on.
    job.environment.emplace_back("SIEVE_WIRE_CODEC", mode == Mode::Codec ? "on" : "off");
    job.iterations = o.iterations;
    job.warmup = o.warmup;
    job.chunk_bytes = o.chunk_bytes;
    job.inflight = o.inflight;
    job.timeout_s = static_cast<int>(
        std::max<long>(5, std::chrono::duration_cast<std::chrono::seconds>(run.deadline - Clock::now()).count()));

    const std::string failure = run_mode(job, o, run.use_lab ? run.lab : nullptr, run.deadline, progress, &result);
    progress.finish();
    if (!result.ok) {
      result.error = failure;
      if (failure.find("timed out") != std::string::npos) {
        result.error += " (the run's deadline: " + std::to_string(run.budget_s) + " s, " +
                        (o.timeout_s > 0 ? "--timeout" : "estimated from the model and --rate; --timeout S sets it") +
                        ")";
      }
      report->failure = std::string(mode_name(mode)) + ": " + result.error;
      report->wrong_values = failure.find("WRONG RESULT") != std::string::npos;
      report->modes.push_back(result);
      return tools::stop_signal() ? 128 + tools::stop_signal() : 1;
    }
    report->modes.push_back(result);
  }
  return 0;
}

// --gloo: the same all-reduces through torch.distributed's Gloo, in the lab only.
ModeResult run_gloo_mode(const Options& o, const RunSetup& run, const std::string& script, const std::string& python,
                         Progress& progress) {
  ModeResult gloo;
  gloo.name = "gloo";
  if (!run.use_lab) {
    gloo.error = "the Gloo peer runs in the namespace lab only (run as root, without --loopback)";
  } else {
    GlooJob job;
    job.script = script;
    job.python = python;
    for (const Bucket& b : run.work->buckets) job.bucket_elements.push_back(b.elements);
    for (const FsdpGroup& g : run.work->fsdp.groups) job.shard_elements.push_back(g.shard_elements);
    job.nodes = o.nodes;
    for (int i = 0; i < o.nodes; ++i) job.namespaces.push_back(run.lab->ns(i));
    job.master_address = "10.77.0.1";
    job.ifname = "eth0";
    job.dtype = o.dtype;
    job.iterations = o.iterations;
    job.warmup = o.warmup;
    job.deadline = run.deadline;
    progress.update("gloo", 0, 1);
    run_gloo(job, &gloo);
    progress.finish();
    if (gloo.error.find("timed out") != std::string::npos)  // slow, not broken: say what ran out
      gloo.error += " (the run's deadline: " + std::to_string(run.budget_s) + " s, " +
                    (o.timeout_s > 0 ? "--timeout" : "estimated from the model and --rate; --timeout S sets it") +
                    "; the Gloo ranks import PyTorch first, slow on a loaded machine)";
  }
  gloo.ideal_speedup = 0;
  return gloo;
}

}  // namespace

int run_bench(const Options& o, RunReport* report) {
  tools::install_stop_handlers();
  signal(SIGPIPE, SIG_IGN);

  const auto started = Clock::now();
  // What was asked for is reported even when the run stops before the workload exists.
  report->model = o.masks_file.empty() ? o.model : o.masks_file;
  report->dtype = o.dtype;
  report->nodes = o.nodes;
  report->iterations = o.iterations;
  report->fsdp = o.fsdp;
  const std::string conflict = tools::emulated_link_transport_conflict("sieve-bench");
  if (!conflict.empty()) {
    report->failure = conflict;
    return 2;
  }
  const tools::InstallLayout layout = tools::InstallLayout::current();
  Workload work;
  RunSetup run;
  run.work = &work;
  double moved_bytes = 0;
  if (const int status = prepare_workload(o, layout, report, &work, &run.library, &moved_bytes)) return status;
  run.budget_s = run_budget_seconds(o, moved_bytes, work.compacted_share);
  run.deadline = started + std::chrono::seconds(run.budget_s);
  if (const int status = choose_lab(o, report, &run.use_lab)) return status;
  const std::string gloo_script = !o.gloo_script.empty() ? o.gloo_script : layout.script("gloo_allreduce.py");
  const std::string python = gloo_python(o.python);
  std::string error;
  if (o.gloo && !gloo_supports(gloo_script, o.dtype, &error, python)) {
    report->failure = "--gloo: " + error;
    return 2;
  }
  const std::string netlab = !o.netlab.empty() ? o.netlab : layout.script("netlab.sh");
  Lab lab(netlab, "sb" + std::to_string(getpid()), layout.impairer());
  run.lab = &lab;
  if (const int status = set_up_link(o, run.use_lab, netlab, lab, report, &run.environment)) return status;

  Progress progress(!o.quiet);
  if (const int status = run_modes(o, run, progress, report)) return status;
  if (o.gloo) report->modes.push_back(run_gloo_mode(o, run, gloo_script, python, progress));
  if (tools::stop_signal()) {
    report->failure = "interrupted by " + tools::stop_signal_name();
    return 128 + tools::stop_signal();
  }
  return 0;
}

}  // namespace sieve::bench
