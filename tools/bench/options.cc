#include "tools/bench/options.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "tools/bench/models.h"

namespace sieve::bench {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Dense: return "dense";
    case Mode::Compacted: return "compacted";
    case Mode::Codec: return "codec";
  }
  return "?";
}

std::string usage_text() {
  std::string models;
  for (const std::string& name : model_names()) models += (models.empty() ? "" : ", ") + name;
  return "usage: sieve-bench [options]\n"
         "N processes act as nodes: each loads the Sieve plugin as NCCL does and they run NCCL-style ring\n"
         "all-reduce over a model's DDP gradient buckets, dense and pruned, and check every sum exactly.\n"
         "As root the nodes live in network namespaces on a tc-shaped virtual switch (tools/netlab.sh);\n"
         "otherwise (or with --loopback) they use loopback.\n\n"
         "  --nodes N             nodes (default 4)\n"
         "  --model NAME          " + models + " (default resnet50)\n"
         "  --masks FILE          your own model: one BOOL/U8 mask tensor per parameter (safetensors)\n"
         "  --prune KIND          unstructured | channel | none (default unstructured)\n"
         "  --density D           fraction of weights kept, 0 < D <= 1 (default 0.2 = 80 % pruned)\n"
         "  --seed S              pruning seed, the same on every node (default 1)\n"
         "  --dtype T             fp32 | bf16 (default fp32)\n"
         "  --modes LIST          dense,compacted"
         ",codec"
         " (default dense,compacted)\n"
         "  --iters N             measured all-reduces of the whole model per mode (default 5)\n"
         "  --warmup N            unmeasured ones first (default 1)\n"
         "  --rate R              switch port rate, tc syntax: 100mbit, 1gbit, 10gbit; none = unshaped (default 1gbit)\n"
         "  --delay T --loss P --reorder P   netem on every port (e.g. 1ms, 1%, 25%)\n"
         "  --loopback            loopback even as root (shaped by the plugin's own rate limit when it has one)\n"
         "  --gloo                also run PyTorch's Gloo all-reduce on the same lab and buckets\n"
         "  --plugin PATH         libnccl-net-sieve.so (default: the one of this build)\n"
         "  --chunk BYTES         ring chunk (default 131072)   --inflight N  chunks in flight (default 16)\n"
         "  --timeout S           hard limit for the whole run (default 300)\n"
         "  --json                one JSON object on stdout instead of the table\n"
         "  --quiet               no progress bar\n";
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

bool takes_value(const std::string& arg) {
  static const char* const kValued[] = {"--nodes", "--model", "--masks", "--prune", "--density", "--seed",
                                        "--dtype", "--modes", "--iters", "--warmup", "--rate", "--delay",
                                        "--loss", "--reorder", "--plugin", "--netlab", "--gloo-script",
                                        "--chunk", "--inflight", "--timeout"};
  for (const char* name : kValued) {
    if (arg == name) return true;
  }
  return false;
}

}  // namespace

bool parse_options(int argc, char** argv, Options* o, std::string* message, bool* help) {
  *help = false;
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
    long n = 0;
    if (arg == "-h" || arg == "--help") {
      *help = true;
      *message = usage_text();
      return false;
    } else if (arg == "--json") {
      o->json = true;
    } else if (arg == "--quiet") {
      o->quiet = true;
    } else if (arg == "--loopback") {
      o->loopback = true;
    } else if (arg == "--gloo") {
      o->gloo = true;
    } else if (!takes_value(arg)) {
      *message = "unknown option '" + arg + "'\n" + usage_text();
      return false;
    } else if (!value(&v)) {
      return false;
    } else if (arg == "--nodes") {
      if (!parse_int(v, 2, 64, &n)) return *message = "--nodes: a number from 2 to 64", false;
      o->nodes = static_cast<int>(n);
    } else if (arg == "--model") {
      if (!make_model(v)) return *message = "--model: unknown model '" + v + "'\n" + usage_text(), false;
      o->model = v;
    } else if (arg == "--masks") {
      o->masks_file = v;
    } else if (arg == "--prune") {
      if (v == "unstructured") o->prune.kind = PruneKind::Unstructured;
      else if (v == "channel") o->prune.kind = PruneKind::Channel;
      else if (v == "none") o->prune.kind = PruneKind::None;
      else return *message = "--prune: unstructured, channel or none", false;
    } else if (arg == "--density") {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(d > 0 && d <= 1)) return *message = "--density: a fraction in (0, 1]", false;
      o->prune.density = d;
    } else if (arg == "--seed") {
      if (!parse_int(v, 0, 1L << 40, &n)) return *message = "--seed: a non-negative number", false;
      o->prune.seed = static_cast<uint64_t>(n);
    } else if (arg == "--dtype") {
      auto type = parse_dtype(v);
      if (!type) return *message = "--dtype: fp32 or bf16", false;
      o->dtype = *type;
    } else if (arg == "--modes") {
      if (!parse_modes(v, &o->modes, message)) return false;
    } else if (arg == "--iters") {
      if (!parse_int(v, 1, 1000, &n)) return *message = "--iters: 1 to 1000", false;
      o->iterations = static_cast<int>(n);
    } else if (arg == "--warmup") {
      if (!parse_int(v, 0, 100, &n)) return *message = "--warmup: 0 to 100", false;
      o->warmup = static_cast<int>(n);
    } else if (arg == "--rate") {
      if (v == "none") v.clear();
      if (!v.empty() && rate_bits_per_second(v) <= 0) return *message = "--rate: like 100mbit, 1gbit, 10gbit or none", false;
      o->rate = v;
    } else if (arg == "--delay") {
      o->delay = v;
    } else if (arg == "--loss") {
      o->loss = v;
    } else if (arg == "--reorder") {
      o->reorder = v;
    } else if (arg == "--plugin") {
      o->plugin = v;
    } else if (arg == "--netlab") {
      o->netlab = v;
    } else if (arg == "--gloo-script") {
      o->gloo_script = v;
    } else if (arg == "--chunk") {
      if (!parse_int(v, 64, 64L << 20, &n)) return *message = "--chunk: bytes from 64 to 64M", false;
      o->chunk_bytes = static_cast<size_t>(n);
    } else if (arg == "--inflight") {
      if (!parse_int(v, 1, 32, &n)) return *message = "--inflight: 1 to 32 (NCCL's requests per comm)", false;
      o->inflight = static_cast<int>(n);
    } else if (arg == "--timeout") {
      if (!parse_int(v, 5, 86400, &n)) return *message = "--timeout: seconds, 5 to 86400", false;
      o->timeout_s = static_cast<int>(n);
    } else {
      *message = "unknown option '" + arg + "'\n" + usage_text();
      return false;
    }
  }
  if (o->prune.kind == PruneKind::None && !o->masks_file.empty()) {
    *message = "--masks and --prune none contradict each other";
    return false;
  }
  return true;
}

}  // namespace sieve::bench
