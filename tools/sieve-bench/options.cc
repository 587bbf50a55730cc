// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "tools/common/install_layout.h"
#include "tools/sieve-bench/models.h"
#include "tools/sieve-impair/impairment.h"

namespace sieve::bench {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Dense: return "dense";
    case Mode::Compacted: return "compacted";
    case Mode::Codec: return "codec";
  }
  return "?";
}

namespace {
std::string model_list() {
  std::string models;
  for (const std::string& name : model_names()) models += (models.empty() ? "" : ", ") + name;
  return models;
}
}  // namespace

std::string usage_text() {
  const std::string models = model_list();
  return "usage: sieve-bench [options]\n"
         "N processes act as nodes: each loads the Sieve plugin as NCCL does and they run NCCL-style ring\n"
         "all-reduce over a model's DDP gradient buckets (or, with --fsdp, FSDP's all-gathers and\n"
         "reduce-scatters), dense and pruned, and check every value exactly.\n"
         "As root the nodes live in network namespaces on a tc-shaped virtual switch (netlab.sh);\n"
         "otherwise (without root or CAP_NET_ADMIN, or with --loopback) they use loopback.\n\n"
         "  --nodes N             nodes (default 4)\n"
         "  --model NAME          " +
         models +
         " (default resnet50)\n"
         "  --masks FILE          your own model: one BOOL/U8 mask tensor per parameter (safetensors);\n"
         "                        with --model, checked against that model's parameter shapes\n"
         "  --prune KIND          unstructured | channel | none (default unstructured)\n"
         "  --density D           fraction of weights kept, 0 < D <= 1 (default 0.2 = 80 % pruned)\n"
         "  --seed S              pruning seed, the same on every node (default 1)\n"
         "  --dtype T             fp32 | bf16 (default fp32)\n"
         "  --modes LIST          dense,compacted"
         ",codec"
         " (default dense,compacted)\n"
         "  --steps N             measured steps per mode: all-reduces of the whole model, FSDP steps with\n"
         "                        --fsdp, training steps with --train (default 5; 10 with --train)\n"
         "  --iters N             deprecated: the former name of --steps for the emulated rings\n"
         "  --warmup N            unmeasured ones first (default 1)\n"
         "  --rate R              switch port rate, tc syntax: 100mbit, 1gbit, 10gbit; none = unshaped (default "
         "1gbit)\n"
         "  --delay T             one-way delay on every port, e.g. 1ms, 250us (namespaces only)\n"
         "  --jitter T            uniform +-T around --delay, at most --delay\n"
         "  --loss P              packet loss, e.g. 1%, 0.5%\n"
         "  --reorder P           share of packets sent ahead of delayed ones, e.g. 25% (needs --delay)\n"
         "  --loopback            loopback even as root (shaped by the plugin's own rate limit when it has one)\n"
         "  --gloo                also run PyTorch's Gloo on the same lab and workload (namespaces only)\n"
         "  --fsdp                FSDP's traffic instead of DDP's: per parameter group (each block, then the rest),\n"
         "                        an all-gather of parameters and a reduce-scatter of gradients in FSDP2's sharded\n"
         "                        layout; compacted = each shard's kept elements, padded to the largest shard's,\n"
         "                        as the proxy sends them (where Gloo has no reduce_scatter, --gloo all-reduces)\n"
         "  --train ddp           real DDP training instead: torchvision's ResNet-18 pruned to --density, one\n"
         "                        PyTorch rank per node (Gloo, namespaces only), modes side by side: default,\n"
         "                        sieve, sieve-bf16, bf16-compress, powersgd, default-alt (ddp_train.py)\n"
         "  --train fsdp2         real FSDP2 training instead (fully_shard, Gloo, one rank per node): FSDP2 as is\n"
         "                        against Sieve's custom collectives (sieve.fsdp) (fsdp2_train.py)\n"
         "  --train-model NAME    fsdp2: transformer (4.2 M, 50 % pruned) | transformer-23m (the same, 23.1 M)\n"
         "                        | resnet18 (torchvision, 80 % pruned) (default transformer)\n"
         "  --train-modes LIST    --train ddp: the modes to run, comma-separated (default all)\n"
         "  --train-script PATH   --train ddp: the training ranks (default: ddp_train.py, see Files)\n"
         "  --plugin PATH         libnccl-net-sieve.so to load (default: the installed one, see Files)\n"
         "  --netlab PATH         the namespace lab script (default: netlab.sh, see Files)\n"
         "  --gloo-script PATH    the Gloo peer (default: gloo_allreduce.py, see Files)\n"
         "  --python PATH         the Python with PyTorch that runs the Gloo peer and --train's ranks (default:\n"
         "                        python3 on PATH: an activated virtual environment's)\n"
         "  --chunk BYTES         ring chunk, 64 to 64M (default 131072)\n"
         "  --inflight N          chunks in flight, 1 to 32 (default 16)\n"
         "  --timeout S           hard limit for the whole run (default: from the model's size, --rate and the\n"
         "                        modes, with room to spare; a timed-out run still reports what finished)\n"
         "  --json                one JSON object on stdout instead of the table\n"
         "  --quiet               no progress bar\n"
         "  --version             print the version and exit\n"
         "  --help                print this and exit\n"
         "\n"
         "Ctrl-C or SIGTERM stops the run: its nodes are killed and its namespaces removed.\n"
         "Exit status: 0 every sum exact; 1 a failure or a wrong sum; 2 a bad command line or setting;\n"
         "128 + N when stopped by signal N.\n"
         "\n"
         "Files (PREFIX is where sieve-bench is installed: /usr for /usr/bin/sieve-bench):\n"
         "  PREFIX/" +
         tools::installed_libdir() +
         "/libnccl-net-sieve.so   the plugin the nodes load\n"
         "  PREFIX/share/sieve/netlab.sh           the namespace lab\n"
         "  PREFIX/share/sieve/gloo_allreduce.py   the Gloo peer (run by --python)\n"
         "  PREFIX/share/sieve/ddp_train.py        the training ranks of --train ddp (run by --python)\n"
         "  PREFIX/share/sieve/fsdp2_train.py      a rank of --train fsdp2 (run by --python)\n"
         "  PREFIX/bin/sieve-impair                impairments on kernels without netem\n"
         "Run from a build tree, sieve-bench uses that build's library and its source tree's scripts.\n";
}

int run_budget_seconds(const Options& o, double model_bytes, double kept_fraction) {
  if (o.timeout_s > 0) return o.timeout_s;
  // Unshaped links are bound by the CPU: assume 1 Gbit/s. Impairments (sieve-impair forwards in user
  // space; TCP backs off under loss) are assumed to leave 50 Mbit/s at most.
  double rate = rate_bits_per_second(o.rate);
  if (rate <= 0) rate = 1e9;
  if (!(o.delay.empty() && o.loss.empty() && o.reorder.empty())) rate = std::min(rate, 50e6);
  const double per_dense = 2.0 * (o.nodes - 1) / o.nodes * model_bytes * 8 / rate;
  double share = 0;  // of a dense all-reduce's bytes, summed over the modes
  for (Mode mode : o.modes)
    share += mode == Mode::Dense ? 1.0 : mode == Mode::Compacted ? kept_fraction : kept_fraction + 1.0 / 16;
  // An FSDP step on Gloo may all-reduce where it cannot reduce-scatter: half as much again.
  if (o.gloo) share += o.fsdp ? 1.5 : 1.0;
  const double rounds = o.warmup + o.iterations;
  double seconds = 120 + 3 * rounds * per_dense * share;  // 120 s: lab, processes, connections
  // Each Gloo rank imports PyTorch first, all of them at once: tens of seconds apiece on a loaded
  // 2-core machine, which the fixed allowance above does not cover (a demo's Gloo once timed out).
  if (o.gloo) seconds += 15.0 * o.nodes + 60;
  return static_cast<int>(std::min(86400.0, std::ceil(seconds)));
}

double rate_bits_per_second(const std::string& rate) {
  if (rate.empty()) return 0;
  char* end = nullptr;
  const double number = std::strtod(rate.c_str(), &end);
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit == "bit") return number;
  if (unit == "kbit") return number * 1e3;
  if (unit == "mbit") return number * 1e6;
  if (unit == "gbit") return number * 1e9;
  return 0;
}

namespace {

bool parse_int(const std::string& text, long lo, long hi, long* out) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < lo || value > hi) return false;
  *out = value;
  return true;
}

bool parse_modes(const std::string& text, std::vector<Mode>* modes, std::string* message) {
  modes->clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "dense") {
      modes->push_back(Mode::Dense);
    } else if (item == "compacted") {
      modes->push_back(Mode::Compacted);
    } else if (item == "codec") {
      modes->push_back(Mode::Codec);
    } else {
      *message = "--modes: unknown mode '" + item + "' (dense, compacted, codec)";
      return false;
    }
  }
  if (modes->empty()) *message = "--modes: name at least one mode";
  return !modes->empty();
}

const char* const kFlags[] = {"--json", "--quiet", "--loopback", "--gloo", "--fsdp", "--version", "--help"};
const char* const kValued[] = {"--nodes",  "--model",        "--masks",      "--prune",  "--density", "--seed",
                               "--dtype",  "--modes",        "--iters",      "--warmup", "--rate",    "--delay",
                               "--jitter", "--loss",         "--reorder",    "--plugin", "--netlab",  "--gloo-script",
                               "--chunk",  "--inflight",     "--timeout",    "--train",  "--steps",   "--train-modes",
                               "--python", "--train-script", "--train-model"};

bool takes_value(const std::string& arg) {
  for (const char* name : kValued) {
    if (arg == name) return true;
  }
  return false;
}

// tc's time and percentage syntax, as netem and sieve-impair both read it; the unit is required
// (a bare number means microseconds to tc and milliseconds to sieve-impair).
bool check_duration(const std::string& option, const std::string& text, std::string* message) {
  int64_t us = 0;
  std::string why;
  const bool has_unit = !text.empty() && std::isalpha(static_cast<unsigned char>(text.back()));
  if (!has_unit || !impair::parse_duration_us(text, &us, &why)) {
    *message = option + " '" + text + "': a duration from 0 to 60 s with its unit, like 1ms or 250us";
    return false;
  }
  return true;
}

bool check_percentage(const std::string& option, const std::string& text, std::string* message) {
  double p = 0;
  std::string why;
  if (text.empty() || text.back() != '%' || !impair::parse_probability(text, &p, &why)) {
    *message = option + " '" + text + "': a percentage from 0% to 100%, like 1% or 0.5%";
    return false;
  }
  return true;
}

int64_t duration_us(const std::string& text) {
  int64_t us = 0;
  std::string ignored;
  impair::parse_duration_us(text, &us, &ignored);
  return us;
}

// Combinations, checked once every option is known.
bool check_combinations(const Options& o, std::string* message) {
  if (!o.masks_file.empty()) {
    if (o.prune_given || o.density_given) {
      *message = std::string(o.prune_given ? "--prune" : "--density") +
                 " does not apply with --masks: the mask file says what is kept";
      return false;
    }
  }
  if (!o.train.empty()) {
    if (o.loopback) return *message = "--train runs in the namespace lab only; leave out --loopback", false;
    if (o.gloo || o.fsdp || !o.masks_file.empty())
      return *message = std::string(o.gloo   ? "--gloo"
                                    : o.fsdp ? "--fsdp"
                                             : "--masks") +
                        " does not apply with --train (it trains ResNet-18 with DDP)",
             false;
  } else if (!o.train_modes.empty() || !o.train_script.empty()) {
    return *message = std::string(!o.train_modes.empty() ? "--train-modes" : "--train-script") +
                      " applies only with --train ddp",
           false;
  }
  if (!o.jitter.empty() && o.delay.empty()) return *message = "--jitter needs --delay (it varies the delay)", false;
  if (!o.jitter.empty() && duration_us(o.jitter) > duration_us(o.delay))
    return *message =
               "--jitter " + o.jitter + " exceeds --delay " + o.delay + " (a packet cannot leave before it arrived)",
           false;
  if (!o.reorder.empty() && o.delay.empty())
    return *message = "--reorder needs --delay (reordered packets overtake delayed ones)", false;
  if (o.loopback) {
    const char* impairment = !o.delay.empty()     ? "--delay"
                             : !o.jitter.empty()  ? "--jitter"
                             : !o.loss.empty()    ? "--loss"
                             : !o.reorder.empty() ? "--reorder"
                                                  : nullptr;
    if (impairment) {
      *message = std::string(impairment) + " needs the namespace lab; --loopback has no netem (leave out one of them)";
      return false;
    }
    if (o.gloo) return *message = "--gloo runs in the namespace lab only; leave out --loopback", false;
  }
  return true;
}

// How a valued option was taken: applied, refused (*message says why), or not one of this group's.
enum class Applied { kOk, kBad, kNotMine };

// The valued options about what is all-reduced: nodes, model, masks, pruning, type, modes, counts.
// *steps takes --steps and --iters, whose bound depends on the kind of run (parse_options checks it).
Applied apply_workload_option(const std::string& arg, const std::string& v, Options* o, int* steps,
                              std::string* message) {
  long n = 0;
  if (arg == "--nodes") {
    if (!parse_int(v, 2, 64, &n)) return *message = "--nodes: a number from 2 to 64", Applied::kBad;
    o->nodes = static_cast<int>(n);
  } else if (arg == "--model") {
    if (!make_model(v)) return *message = "--model: unknown model '" + v + "' (" + model_list() + ")", Applied::kBad;
    o->model = v;
    o->model_given = true;
  } else if (arg == "--masks") {
    o->masks_file = v;
  } else if (arg == "--prune") {
    if (v == "unstructured") o->prune.kind = PruneKind::Unstructured;
    else if (v == "channel") o->prune.kind = PruneKind::Channel;
    else if (v == "none") o->prune.kind = PruneKind::None;
    else return *message = "--prune: unstructured, channel or none", Applied::kBad;
    o->prune_given = true;
  } else if (arg == "--density") {
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(d > 0 && d <= 1))
      return *message = "--density: a fraction in (0, 1]", Applied::kBad;
    o->prune.density = d;
    o->density_given = true;
  } else if (arg == "--seed") {
    if (!parse_int(v, 0, 1L << 40, &n)) return *message = "--seed: a non-negative number", Applied::kBad;
    o->prune.seed = static_cast<uint64_t>(n);
  } else if (arg == "--dtype") {
    auto type = parse_dtype(v);
    if (!type) return *message = "--dtype: fp32 or bf16", Applied::kBad;
    o->dtype = *type;
  } else if (arg == "--modes") {
    if (!parse_modes(v, &o->modes, message)) return Applied::kBad;
  } else if (arg == "--steps" || arg == "--iters") {
    // One count for every kind of run; its bound depends on the kind, checked once all is read.
    if (!parse_int(v, 1, 10000, &n)) return *message = arg + ": 1 to 10000", Applied::kBad;
    *steps = static_cast<int>(n);
    if (arg == "--iters") o->notes.push_back("--iters is deprecated: use --steps (the same count)");
  } else if (arg == "--warmup") {
    if (!parse_int(v, 0, 100, &n)) return *message = "--warmup: 0 to 100", Applied::kBad;
    o->warmup = static_cast<int>(n);
  } else {
    return Applied::kNotMine;
  }
  return Applied::kOk;
}

// The valued options about the link and the run: shaping, impairments, programs and scripts,
// training, transport tuning, the deadline.
Applied apply_run_option(const std::string& arg, std::string v, Options* o, std::string* message) {
  long n = 0;
  if (arg == "--rate") {
    if (v == "none") v.clear();
    if (!v.empty() && rate_bits_per_second(v) <= 0)
      return *message = "--rate: like 100mbit, 1gbit, 10gbit or none", Applied::kBad;
    o->rate = v;
  } else if (arg == "--delay") {
    if (!check_duration(arg, v, message)) return Applied::kBad;
    o->delay = v;
  } else if (arg == "--jitter") {
    if (!check_duration(arg, v, message)) return Applied::kBad;
    o->jitter = v;
  } else if (arg == "--loss") {
    if (!check_percentage(arg, v, message)) return Applied::kBad;
    o->loss = v;
  } else if (arg == "--reorder") {
    if (!check_percentage(arg, v, message)) return Applied::kBad;
    o->reorder = v;
  } else if (arg == "--plugin") {
    o->plugin = v;
  } else if (arg == "--netlab") {
    o->netlab = v;
  } else if (arg == "--gloo-script") {
    o->gloo_script = v;
  } else if (arg == "--train") {
    if (v != "ddp" && v != "fsdp2") return *message = "--train: ddp or fsdp2", Applied::kBad;
    o->train = v;
  } else if (arg == "--train-modes") {
    if (v.empty()) return *message = "--train-modes: name at least one mode", Applied::kBad;
    o->train_modes = v;
  } else if (arg == "--train-script") {
    o->train_script = v;
  } else if (arg == "--train-model") {
    if (v != "transformer" && v != "transformer-23m" && v != "resnet18") {
      return *message = "--train-model: transformer, transformer-23m or resnet18", Applied::kBad;
    }
    o->train_model = v;
  } else if (arg == "--python") {
    o->python = v;
  } else if (arg == "--chunk") {
    if (!parse_int(v, 64, 64L << 20, &n)) return *message = "--chunk: bytes from 64 to 64M", Applied::kBad;
    o->chunk_bytes = static_cast<size_t>(n);
  } else if (arg == "--inflight") {
    if (!parse_int(v, 1, 32, &n)) return *message = "--inflight: 1 to 32 (NCCL's requests per comm)", Applied::kBad;
    o->inflight = static_cast<int>(n);
  } else if (arg == "--timeout") {
    if (!parse_int(v, 5, 86400, &n)) return *message = "--timeout: seconds, 5 to 86400", Applied::kBad;
    o->timeout_s = static_cast<int>(n);
  } else {
    return Applied::kNotMine;
  }
  return Applied::kOk;
}

}  // namespace

std::vector<std::string> option_names() {
  std::vector<std::string> names(std::begin(kFlags), std::end(kFlags));
  names.insert(names.end(), std::begin(kValued), std::end(kValued));
  return names;
}

bool parse_options(int argc, char** argv, Options* o, std::string* message, bool* help) {
  *help = false;
  int steps = 0;  // --steps (or --iters): 0 = the kind of run's default
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        *message = arg + " needs a value";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "-h" || arg == "--help") {
      *help = true;
      *message = usage_text();
      return false;
    } else if (arg == "--version") {
      o->version = true;
      return false;
    } else if (arg == "--json") {
      o->json = true;
    } else if (arg == "--quiet") {
      o->quiet = true;
    } else if (arg == "--loopback") {
      o->loopback = true;
    } else if (arg == "--gloo") {
      o->gloo = true;
    } else if (arg == "--fsdp") {
      o->fsdp = true;
    } else if (!takes_value(arg)) {
      *message = "unknown option '" + arg + "' (--help lists them)";
      return false;
    } else if (!value(&v)) {
      return false;
    } else {
      Applied applied = apply_workload_option(arg, v, o, &steps, message);
      if (applied == Applied::kNotMine) applied = apply_run_option(arg, v, o, message);
      if (applied == Applied::kNotMine) *message = "unknown option '" + arg + "' (--help lists them)";
      if (applied != Applied::kOk) return false;
    }
  }
  if (steps > 0 && o->train.empty() && steps > 1000)
    return *message = "--steps: 1 to 1000 measured all-reduces or FSDP steps", false;
  if (steps > 0) (o->train.empty() ? o->iterations : o->steps) = steps;
  return check_combinations(*o, message);
}

}  // namespace sieve::bench
