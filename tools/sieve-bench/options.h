// SPDX-License-Identifier: Apache-2.0
// sieve-bench's command line.
#pragma once

#include <string>
#include <vector>

#include "tools/sieve-bench/dtype.h"
#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {

enum class Mode {
  Dense,      // the unpruned model's gradients, every element nonzero, sent as they are
  Compacted,  // the pruned model: kept elements gathered, all-reduced, scattered back (the proxy)
  Codec,      // the pruned model's zero-filled gradients sent whole; the transport elides the zeros
};
const char* mode_name(Mode mode);

struct Options {
  int nodes = 4;
  std::string model = "resnet50";
  std::string masks_file;  // user's own model: one mask tensor per parameter (safetensors)
  PruneSpec prune{PruneKind::Unstructured, 0.2, 1};
  DType dtype = DType::kF32;
  std::vector<Mode> modes{Mode::Dense, Mode::Compacted};
  int iterations = 5;  // measured all-reduces or FSDP steps per mode (--steps without --train)
  int warmup = 1;
  std::string rate = "1gbit";                // tc rate in namespaces; "" = unshaped
  std::string delay, jitter, loss, reorder;  // netem on every port (checked when parsed)
  bool loopback = false;                     // force loopback even as root
  std::string plugin;                        // path of libnccl-net-sieve.so ("" = next to this build)
  std::string netlab;                        // path of tools/share/netlab.sh ("" = from the source tree)
  // Finer than NCCL's 512 KiB steps: on a shaped 1 Gbit/s ring 128 KiB x 16 measured ~5 % faster
  // than 512 KiB x 8 (less pipeline bubble at each step's hand-over), with the same bytes in flight.
  size_t chunk_bytes = 128 << 10;
  int inflight = 16;
  int timeout_s = 0;  // whole run; every node and every wait is bounded by it; 0 = run_budget_seconds()
  bool json = false;
  bool gloo = false;  // also run tools/share/gloo_allreduce.py on the same lab and buckets
  // FSDP's collectives (all-gather of parameters, reduce-scatter of gradients, per parameter group)
  // instead of DDP's all-reduce of gradient buckets.
  bool fsdp = false;
  std::string gloo_script;
  // --train ddp|fsdp2: real training by Python ranks (one per node of the namespace lab) instead of the
  // emulated rings: DDP with Sieve's comm hook (train_ddp.h, tools/share/ddp_train.py) or FSDP2 with its
  // custom collectives (train_fsdp2.h, tools/share/fsdp2_train.py); the ranks measure and report.
  std::string train;
  int steps = 10;                           // training steps per mode (--steps with --train)
  std::string train_modes;                  // ddp: "" = the script's own list (every mode)
  std::string train_model = "transformer";  // fsdp2: transformer | resnet18
  std::string python;        // --python: the interpreter with PyTorch for --gloo and --train (empty: python3 on PATH)
  std::string train_script;  // ddp: "" = ddp_train.py from share/sieve or the source tree
  // Said on stderr before the run (a deprecated option's replacement), never an error.
  std::vector<std::string> notes;
  bool quiet = false;
  bool version = false;  // --version: print the tool's name and version, run nothing
  // Set on the command line (not defaults): --masks refuses what it would silently override.
  bool model_given = false, prune_given = false, density_given = false;
};

// Parses and checks argv, combinations included, before any work. On error, --help or --version returns
// false: *help with the usage in *message for --help, options->version for --version, else the error.
bool parse_options(int argc, char** argv, Options* options, std::string* message, bool* help);
std::string usage_text();
// Every option parse_options accepts (for the test that --help lists them all).
std::vector<std::string> option_names();

// The run's deadline in seconds: --timeout when given, else from the work itself (the ring moves
// 2 (N-1)/N of the model out of each node per all-reduce, at --rate, for every round of every mode),
// with room for slow TCP and shared cores. It bounds a hang; it must never cut a healthy run short.
int run_budget_seconds(const Options& options, double model_bytes, double kept_fraction);

// "1gbit" -> 1e9 bits per second; 0 when the text is empty or does not parse.
double rate_bits_per_second(const std::string& rate);

}  // namespace sieve::bench
