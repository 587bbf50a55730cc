// SPDX-License-Identifier: Apache-2.0
// sieve-impair: netem for kernels without sch_netem. Packets that an iptables NFQUEUE rule hands to
// user space (metadata only, never the payload) get a fate from Impairment: dropped, passed at once,
// or held and passed later, which delays them and, with jitter or --reorder, reorders them.
//
//   sieve-impair --queue N [--loss 1%] [--delay 5ms] [--jitter 1ms] [--reorder 25%] [--seed S]
//                [--duration S] [--stats FILE]
//
// One thread: poll() on the queue's netlink socket with the next release time as timeout, a min-heap
// of held packet ids. Everything is bounded: the heap (packets beyond it are dropped, as netem drops
// beyond its limit), the run time (--duration), the exit (held packets are accepted on SIGTERM/SIGINT).
// Pair the rule with --queue-bypass so traffic flows unimpaired whenever this program is not bound.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <string>
#include <vector>

#include "plugin/sieve.h"
#include "tools/sieve-impair/impairment.h"

namespace {

using sieve::impair::Decision;
using sieve::impair::Fate;
using sieve::impair::Impairment;
using sieve::impair::ImpairmentOptions;

constexpr size_t kMaxHeld = 100000;      // netem's default limit is 1000; the lab asks for 100000
constexpr int kSocketBuffer = 32 << 20;  // a burst of GSO-split segments must not overflow netlink
constexpr int64_t kStatsEveryUs = 200 * 1000;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int64_t now_us() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

struct Counters {
  uint64_t seen = 0, dropped = 0, delayed = 0, reordered = 0, passed = 0, over_limit = 0;
  uint64_t released_at_exit = 0, verdict_errors = 0, receive_errors = 0;
};

struct Held {
  int64_t release_us;
  uint64_t order;  // ties leave in arrival order
  uint32_t id;
  bool operator>(const Held& other) const {
    return release_us != other.release_us ? release_us > other.release_us : order > other.order;
  }
};

struct Args {
  int queue = -1;
  ImpairmentOptions impairment;
  int64_t duration_us = 0;  // 0 = until a signal
  std::string stats_file;
};

struct State {
  nfq_q_handle* queue = nullptr;
  Impairment* impairment = nullptr;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held;
  uint64_t arrivals = 0;
  Counters counters;
};

void verdict(State& s, uint32_t id, uint32_t fate) {
  if (nfq_set_verdict(s.queue, id, fate, 0, nullptr) < 0) ++s.counters.verdict_errors;
}

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* packet, void* data) {
  State& s = *static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(packet);
  if (!header) return 0;
  const uint32_t id = ntohl(header->packet_id);
  ++s.counters.seen;
  const Decision d = s.impairment->decide(now_us());
  if (d.fate == Fate::kDrop || (d.fate == Fate::kHold && s.held.size() >= kMaxHeld)) {
    ++(d.fate == Fate::kDrop ? s.counters.dropped : s.counters.over_limit);
    verdict(s, id, NF_DROP);
  } else if (d.fate == Fate::kHold) {
    ++s.counters.delayed;
    s.held.push({d.release_us, s.arrivals++, id});
  } else {
    ++(d.reordered ? s.counters.reordered : s.counters.passed);
    verdict(s, id, NF_ACCEPT);
  }
  return 0;
}

void release_due(State& s, int64_t now) {
  while (!s.held.empty() && s.held.top().release_us <= now) {
    verdict(s, s.held.top().id, NF_ACCEPT);
    s.held.pop();
  }
}

std::string describe(const Counters& c) {
  char text[400];
  snprintf(text, sizeof text,
           "seen %llu\ndropped %llu\ndelayed %llu\nreordered %llu\npassed %llu\nover_limit %llu\n"
           "released_at_exit %llu\nverdict_errors %llu\nreceive_errors %llu\n",
           (unsigned long long)c.seen, (unsigned long long)c.dropped, (unsigned long long)c.delayed,
           (unsigned long long)c.reordered, (unsigned long long)c.passed, (unsigned long long)c.over_limit,
           (unsigned long long)c.released_at_exit, (unsigned long long)c.verdict_errors,
           (unsigned long long)c.receive_errors);
  return text;
}

// Written whole to a temporary name and renamed, so a reader never sees half a file.
void write_stats(const std::string& path, const Counters& c) {
  if (path.empty()) return;
  const std::string temporary = path + ".tmp";
  FILE* file = fopen(temporary.c_str(), "w");
  if (!file) return;
  const std::string text = describe(c);
  const bool written = fwrite(text.data(), 1, text.size(), file) == text.size();
  if (fclose(file) == 0 && written) rename(temporary.c_str(), path.c_str());
}

const char kUsage[] =
    "usage: sieve-impair --queue N [options]\n"
    "Impairs the packets an iptables NFQUEUE rule hands it (netem's job, for kernels without sch_netem);\n"
    "netlab.sh (the namespace lab of sieve-bench and sieve-perf) starts one per node. Needs root.\n\n"
    "  --queue N        the NFQUEUE number to bind, 0 to 65535 (required)\n"
    "  --loss P         drop probability, like 1% or 0.01\n"
    "  --delay T        delay every kept packet, like 5ms, 250us, 1s (a bare number is ms)\n"
    "  --jitter T       uniform +-T around --delay, at most --delay\n"
    "  --reorder P      share of packets sent at once, ahead of the delayed ones (needs --delay)\n"
    "  --seed S         seed of the packet fates (default 1)\n"
    "  --duration S     stop after S seconds (default: at SIGTERM/SIGINT)\n"
    "  --stats FILE     keep the counters in FILE (rewritten every 200 ms)\n"
    "  --version        print the version and exit\n"
    "  --help           print this and exit\n";

int usage(const char* why) {
  fprintf(stderr, "sieve-impair: %s (--help lists the options)\n", why);
  return 2;
}

bool parse_args(int argc, char** argv, Args* a, std::string* error) {
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (i + 1 >= argc) return *error = key + " needs a value", false;
    const std::string value = argv[i + 1];
    char* end = nullptr;
    // The parsers' messages quote the value; the option is named here.
    auto named = [&](bool ok) {
      if (!ok) *error = key + ": " + *error;
      return ok;
    };
    if (key == "--queue") {
      const long q = strtol(value.c_str(), &end, 10);
      if (*end || value.empty() || q < 0 || q > 65535) return *error = "--queue must be 0..65535", false;
      a->queue = static_cast<int>(q);
    } else if (key == "--loss") {
      if (!named(sieve::impair::parse_probability(value, &a->impairment.loss, error))) return false;
    } else if (key == "--reorder") {
      if (!named(sieve::impair::parse_probability(value, &a->impairment.reorder, error))) return false;
    } else if (key == "--delay") {
      if (!named(sieve::impair::parse_duration_us(value, &a->impairment.delay_us, error))) return false;
    } else if (key == "--jitter") {
      if (!named(sieve::impair::parse_duration_us(value, &a->impairment.jitter_us, error))) return false;
    } else if (key == "--seed") {
      a->impairment.seed = strtoull(value.c_str(), &end, 10);
      if (*end || value.empty()) return *error = "--seed must be a number", false;
    } else if (key == "--duration") {
      const double seconds = strtod(value.c_str(), &end);
      if (*end || value.empty() || !(seconds > 0) || seconds > 86400)
        return *error = "--duration must be 0..86400 s", false;
      a->duration_us = static_cast<int64_t>(seconds * 1e6);
    } else if (key == "--stats") {
      a->stats_file = value;
    } else {
      return *error = "unknown option " + key, false;
    }
  }
  if (a->queue < 0) return *error = "--queue is required", false;
  *error = sieve::impair::validate(a->impairment);
  return error->empty();
}

// Signals stay blocked except inside ppoll, so a stop request is never lost between checks: the
// mask ppoll waits with.
sigset_t block_stop_signals() {
  sigset_t blocked, during_poll;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, &during_poll);
  sigdelset(&during_poll, SIGTERM);
  sigdelset(&during_poll, SIGINT);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return during_poll;
}

// Binds netfilter queue args.queue to state (state.queue), its stats file written to say so; null
// after saying on stderr why it could not.
nfq_handle* bind_queue(const Args& args, State& state) {
  nfq_handle* handle = nfq_open();
  // Binding a queue takes CAP_NET_ADMIN; without it the kernel says EPERM, which must not read as a
  // queue some other program holds.
  const bool privileged = geteuid() == 0;
  if (!handle) {
    fprintf(stderr, "sieve-impair: nfq_open: %s (%s)\n", strerror(errno),
            privileged ? "is the nfnetlink_queue module loaded?" : "it needs root, CAP_NET_ADMIN");
    return nullptr;
  }
  state.queue = nfq_create_queue(handle, static_cast<uint16_t>(args.queue), on_packet, &state);
  if (!state.queue) {
    const int err = errno;
    fprintf(
        stderr, "sieve-impair: cannot bind queue %d: %s (%s)\n", args.queue, strerror(err),
        !privileged || err == EPERM || err == EACCES ? "it needs root, CAP_NET_ADMIN" : "another program bound to it?");
    nfq_close(handle);
    return nullptr;
  }
  if (nfq_set_mode(state.queue, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(state.queue, kMaxHeld * 2) < 0) {
    fprintf(stderr, "sieve-impair: cannot configure queue %d: %s\n", args.queue, strerror(errno));
    nfq_destroy_queue(state.queue);
    nfq_close(handle);
    return nullptr;
  }
  nfnl_rcvbufsiz(nfq_nfnlh(handle), kSocketBuffer);
  const int on = 1;
  setsockopt(nfq_fd(handle), SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);  // overflow drops, never a dead socket
  write_stats(args.stats_file, state.counters);  // its presence tells the lab the queue is bound
  fprintf(stderr, "sieve-impair: queue %d bound\n", args.queue);
  return handle;
}

// Holds and releases packets as the impairment says until a stop signal or --duration, rewriting
// the stats file as it goes.
void impair_until_stopped(const Args& args, State& state, nfq_handle* handle, const sigset_t& during_poll) {
  const int fd = nfq_fd(handle);
  const int64_t started = now_us();
  int64_t last_stats = started;
  std::vector<char> buffer(1 << 16);
  while (!g_stop) {
    const int64_t now = now_us();
    release_due(state, now);
    if (args.duration_us && now - started >= args.duration_us) break;
    int64_t wait_us = 100 * 1000;  // wake at least this often to refresh the stats file
    if (!state.held.empty()) wait_us = std::min(wait_us, state.held.top().release_us - now);
    if (args.duration_us) wait_us = std::min(wait_us, started + args.duration_us - now);
    wait_us = std::max<int64_t>(wait_us, 0);
    timespec timeout{static_cast<time_t>(wait_us / 1000000), static_cast<long>(wait_us % 1000000) * 1000};
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &timeout, &during_poll);
    if (ready > 0) {
      // Drain what is queued, bounded so held packets are released on time under a flood.
      for (int batch = 0; batch < 256; ++batch) {
        const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (n < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++state.counters.receive_errors;
          break;
        }
        nfq_handle_packet(handle, buffer.data(), static_cast<int>(n));
      }
    }
    if (now_us() - last_stats >= kStatsEveryUs) {
      write_stats(args.stats_file, state.counters);
      last_stats = now_us();
    }
  }
}

// Lets every packet still held go, unbinds, and leaves the last stats and a summary line.
void finish(const Args& args, State& state, nfq_handle* handle) {
  while (!state.held.empty()) {
    verdict(state, state.held.top().id, NF_ACCEPT);
    state.held.pop();
    ++state.counters.released_at_exit;
  }
  nfq_destroy_queue(state.queue);
  nfq_close(handle);
  write_stats(args.stats_file, state.counters);
  std::string summary = describe(state.counters);
  summary.pop_back();
  for (char& c : summary) c = c == '\n' ? ',' : c;
  fprintf(stderr, "sieve-impair: queue %d: %s\n", args.queue, summary.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Started in the background by scripts: hold none of their caller's pipes open (a reader waiting
  // for EOF on them would wait for as long as this runs).
  close_range(3, ~0u, 0);
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(kUsage, stdout), 0;
    if (!strcmp(argv[i], "--version")) return printf("sieve-impair %s\n", SIEVE_VERSION_STRING), 0;
  }
  Args args;
  std::string error;
  if (!parse_args(argc, argv, &args, &error)) return usage(error.c_str());
  const sigset_t during_poll = block_stop_signals();
  Impairment impairment(args.impairment);
  State state;
  state.impairment = &impairment;
  nfq_handle* handle = bind_queue(args, state);
  if (!handle) return 1;
  impair_until_stopped(args, state, handle, during_poll);
  finish(args, state, handle);
  return 0;
}
