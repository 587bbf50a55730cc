// SPDX-License-Identifier: Apache-2.0
// What a sieve-bench run measured, and the three ways it is shown: the table, --json, and a
// progress bar on stderr when stderr is a terminal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/sieve-bench/dtype.h"
#include "tools/sieve-bench/options.h"

namespace sieve::bench {

struct ModeResult {
  std::string name;  // dense, compacted, codec, gloo
  bool ok = false;
  std::string error;            // what failed, naming the node
  std::vector<double> seconds;  // per measured all-reduce of the whole model (--fsdp: step): the slowest node
  std::vector<double> compaction_seconds;  // of which gather + scatter on the CPU (slowest node)
  double logical_bytes = 0;                // per node per all-reduce, handed to the transport
  bool has_plugin_wire = false;
  double plugin_wire_bytes = 0;  // per node per all-reduce, the plugin's own count
  bool has_kernel = false;
  double kernel_tx_bytes = 0;  // per node per all-reduce, the interface's tx counter
  double ideal_speedup = 0;    // 0 = not applicable
  std::string device;          // the plugin's device name on node 0
  std::string note;            // what the table says under the rows, e.g. how the Gloo peer ran FSDP's step
  double mean_seconds() const;
  // The table and the speedups use the median: on shared cores one descheduled node stalls the
  // whole ring now and then, and the median is not moved by such an outlier.
  double median_seconds() const;
  double mean_compaction_seconds() const;
  double min_seconds() const;
};

struct RunReport {
  std::string model;  // display name
  int64_t parameters = 0;
  size_t buckets = 0;
  DType dtype = DType::kF32;
  int nodes = 0;
  std::string link;   // "namespaces, 1gbit switch" or "loopback"
  std::string prune;  // "unstructured, density 0.20"
  double kept_fraction = 1;
  int iterations = 0;
  // --fsdp: a step's all-gathers and reduce-scatters per parameter group instead of DDP's buckets.
  bool fsdp = false;
  size_t groups = 0, groups_compacted = 0;
  double padding_fraction = 0;  // of the groups' buffers: FSDP's padding of uneven dim-0 shards
  double compacted_share = 1;   // of the dense elements, what the compacted rings carry
  std::vector<ModeResult> modes;
  bool wrong_values = false;  // some checked sum did not match
  std::string failure;
  // Every requested Sieve mode ran to the end and every sum was checked and matched. A failed run
  // checked only part of the work, so it is neither "exact" nor, unless wrong_values, "wrong".
  bool all_checked_exact() const;
  double model_bytes() const { return static_cast<double>(parameters) * static_cast<double>(dtype_size(dtype)); }
};

std::string format_table(const RunReport& report);
std::string format_json(const RunReport& report);
// "Sieve moved ResNet-50's gradients (80 % pruned) 4.1x faster: ..." ("" when nothing to compare).
std::string summary_line(const RunReport& report);

// A one-line bar redrawn on stderr; silent unless stderr is a terminal and it is enabled.
class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  void update(const std::string& label, int done, int total);
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace sieve::bench
