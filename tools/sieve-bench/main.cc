// SPDX-License-Identifier: Apache-2.0
// sieve-bench: the main job of Sieve on emulated nodes. See usage_text() in options.cc.
#include <cstdio>
#include <string>

#include "plugin/sieve.h"
#include "tools/common/stop_signal.h"
#include "tools/sieve-bench/options.h"
#include "tools/sieve-bench/orchestrator.h"
#include "tools/sieve-bench/report.h"
#include "tools/sieve-bench/train_ddp.h"
#include "tools/sieve-bench/train_fsdp2.h"

int main(int argc, char** argv) {
  using namespace sieve::bench;
  Options options;
  std::string message;
  bool help = false;
  if (!parse_options(argc, argv, &options, &message, &help)) {
    if (options.version) return std::printf("sieve-bench %s\n", SIEVE_VERSION_STRING), 0;
    std::fprintf(help ? stdout : stderr, "%s%s", help ? "" : "sieve-bench: ", message.c_str());
    if (!help) std::fputc('\n', stderr);
    return help ? 0 : 2;
  }
  for (const std::string& note : options.notes) std::fprintf(stderr, "sieve-bench: %s\n", note.c_str());
  if (options.train == "fsdp2") return run_train_fsdp2(options);
  if (!options.train.empty()) {  // real training: the ranks write the report, table or JSON
    sieve::tools::install_stop_handlers();
    std::string output, failure;
    const int status = run_ddp_training(options, &output, &failure);
    std::fputs(output.c_str(), stdout);
    if (status != 0) std::fprintf(stderr, "sieve-bench: FAILED: %s\n", failure.c_str());
    return status;
  }
  RunReport report;
  const int status = run_bench(options, &report);
  if (options.json) {
    std::fputs(format_json(report).c_str(), stdout);
  } else if (!report.modes.empty()) {  // a run stopped before any mode has no table to show
    std::fputs(format_table(report).c_str(), stdout);
  }
  if (status != 0) {
    std::fprintf(stderr, "sieve-bench: FAILED: %s\n", report.failure.c_str());
    if (report.wrong_values) std::fprintf(stderr, "sieve-bench: the all-reduce returned WRONG VALUES\n");
  }
  return status;
}
