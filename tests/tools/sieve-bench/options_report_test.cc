// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tools/sieve-bench/options.h"
#include "tools/sieve-bench/report.h"

namespace sieve::bench {
namespace {

bool parse(std::vector<const char*> args, Options* options, std::string* message) {
  args.insert(args.begin(), "sieve-bench");
  bool help = false;
  return parse_options(static_cast<int>(args.size()), const_cast<char**>(args.data()), options, message, &help);
}

TEST(Options, DefaultsAreTheDemo) {
  Options o;
  std::string message;
  ASSERT_TRUE(parse({}, &o, &message)) << message;
  EXPECT_EQ(o.nodes, 4);
  EXPECT_EQ(o.model, "resnet50");
  EXPECT_EQ(o.prune.kind, PruneKind::Unstructured);
  EXPECT_DOUBLE_EQ(o.prune.density, 0.2);
  EXPECT_EQ(o.rate, "1gbit");
  ASSERT_EQ(o.modes.size(), 2u);
  EXPECT_EQ(o.modes[0], Mode::Dense);
  EXPECT_EQ(o.modes[1], Mode::Compacted);
}

TEST(Options, ParsesEveryKnob) {
  Options o;
  std::string message;
  ASSERT_TRUE(parse({"--nodes", "8", "--model", "vit_b_16", "--prune", "channel", "--density", "0.5", "--dtype", "bf16",
                     "--rate", "10gbit", "--steps", "3", "--warmup", "0", "--json", "--gloo"},
                    &o, &message))
      << message;
  EXPECT_EQ(o.nodes, 8);
  EXPECT_EQ(o.model, "vit_b_16");
  EXPECT_EQ(o.prune.kind, PruneKind::Channel);
  EXPECT_EQ(o.dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(rate_bits_per_second(o.rate), 1e10);
  EXPECT_TRUE(o.json && o.gloo);
  EXPECT_EQ(o.iterations, 3);
  EXPECT_TRUE(o.notes.empty());
  Options loopback;
  ASSERT_TRUE(parse({"--loopback"}, &loopback, &message)) << message;
  EXPECT_TRUE(loopback.loopback);
  ASSERT_TRUE(parse({"--rate", "none"}, &o, &message));
  EXPECT_EQ(o.rate, "");
}

TEST(Options, EveryBadInputGetsAClearError) {
  const std::vector<std::vector<const char*>> bad = {
      {"--nodes", "1"},      {"--nodes", "x"},     {"--model", "resnet51"},
      {"--density", "0"},    {"--density", "1.5"}, {"--dtype", "fp16"},
      {"--modes", "sparse"}, {"--rate", "fast"},   {"--steps", "0"},
      {"--inflight", "33"},  {"--bogus"},          {"--nodes"}};
  for (const auto& args : bad) {
    Options o;
    std::string message;
    EXPECT_FALSE(parse(args, &o, &message)) << args[0];
    EXPECT_FALSE(message.empty()) << args[0];
  }
}

// One name for "how many measured rounds per mode": --steps counts all-reduces (or FSDP steps) of the
// emulated rings and training steps with --train; --iters, its former name for the rings, still works
// with a note naming --steps.
TEST(Options, StepsCountsEveryKindOfRunAndItersIsItsDeprecatedAlias) {
  Options rings, train, old;
  std::string message;
  ASSERT_TRUE(parse({"--steps", "7"}, &rings, &message)) << message;
  EXPECT_EQ(rings.iterations, 7);
  EXPECT_EQ(rings.steps, Options().steps);
  ASSERT_TRUE(parse({"--train", "ddp", "--steps", "2000"}, &train, &message)) << message;
  EXPECT_EQ(train.steps, 2000);
  EXPECT_EQ(train.iterations, Options().iterations);
  ASSERT_TRUE(parse({"--iters", "4"}, &old, &message)) << message;
  EXPECT_EQ(old.iterations, 4);
  ASSERT_EQ(old.notes.size(), 1u);
  EXPECT_EQ(old.notes[0], "--iters is deprecated: use --steps (the same count)");
  Options too_many;
  EXPECT_FALSE(parse({"--steps", "2000"}, &too_many, &message));
  EXPECT_EQ(message, "--steps: 1 to 1000 measured all-reduces or FSDP steps");
}

TEST(Options, HelpListsEveryOption) {
  const std::string usage = usage_text();
  for (const std::string& name : option_names()) EXPECT_NE(usage.find(name + ' '), std::string::npos) << name;
  Options o;
  std::string message;
  bool help = false;
  const char* argv[] = {"sieve-bench", "--version"};
  EXPECT_FALSE(parse_options(2, const_cast<char**>(argv), &o, &message, &help));
  EXPECT_TRUE(o.version);
}

// Values are checked when parsed, before any namespace, node or Gloo process exists, and each
// message names the option.
TEST(Options, ImpairmentsAndCombinationsAreCheckedBeforeAnyWork) {
  const std::vector<std::vector<const char*>> bad = {{"--delay", "banana"},
                                                     {"--loss", "200%"},
                                                     {"--loss", "1"},
                                                     {"--reorder", "x"},
                                                     {"--jitter", "1ms"},
                                                     {"--reorder", "25%"},
                                                     {"--delay", "1ms", "--jitter", "2ms"},
                                                     {"--loopback", "--delay", "1ms"},
                                                     {"--loss", "1%", "--loopback"},
                                                     {"--gloo", "--loopback"},
                                                     {"--masks", "m.safetensors", "--density", "0.5"},
                                                     {"--prune", "channel", "--masks", "m.safetensors"}};
  for (const auto& args : bad) {
    Options o;
    std::string message;
    EXPECT_FALSE(parse(args, &o, &message)) << args[0] << ' ' << args[1];
    bool named = false;
    for (const char* arg : args) named = named || (arg[0] == '-' && message.find(arg) != std::string::npos);
    EXPECT_TRUE(named) << message;
  }
  Options o;
  std::string message;
  ASSERT_TRUE(parse({"--delay", "2ms", "--jitter", "1ms", "--loss", "0.5%", "--reorder", "25%"}, &o, &message))
      << message;
  EXPECT_EQ(o.jitter, "1ms");
  ASSERT_TRUE(parse({"--masks", "m.safetensors", "--model", "resnet18"}, &o, &message)) << message;
}

// The default deadline follows the work: VGG-19 at 100 Mbit/s needs about 66 s per dense all-reduce
// (2 (N-1)/N of 548 MB out of each node), six of them per mode with the warm-up.
TEST(Options, TheDefaultDeadlineFollowsModelSizeAndRate) {
  Options o;
  std::string message;
  ASSERT_TRUE(parse({"--model", "vgg19", "--rate", "100mbit"}, &o, &message)) << message;
  EXPECT_EQ(o.timeout_s, 0);  // automatic
  const double vgg19_bytes = 143667240.0 * 4;
  const double per_dense = 2.0 * 3 / 4 * vgg19_bytes * 8 / 100e6;
  const int budget = run_budget_seconds(o, vgg19_bytes, 0.2);
  EXPECT_GT(budget, 6 * per_dense * 1.2);  // dense and compacted, warm-up included, with room
  Options fast;
  ASSERT_TRUE(parse({"--model", "resnet18", "--rate", "10gbit"}, &fast, &message)) << message;
  EXPECT_LT(run_budget_seconds(fast, 11689512.0 * 4, 0.2), budget);
  // Gloo's ranks import PyTorch before their first all-reduce: more time, at least a minute more.
  // A small model on a fast link moves next to nothing, so only that allowance tells the two apart.
  Options gloo;
  ASSERT_TRUE(parse({"--model", "resnet18", "--rate", "10gbit", "--gloo"}, &gloo, &message)) << message;
  Options same = gloo;
  same.gloo = false;
  EXPECT_GE(run_budget_seconds(gloo, 11689512.0 * 4, 0.2), run_budget_seconds(same, 11689512.0 * 4, 0.2) + 60);
  // An explicit --timeout is what the user asked for.
  ASSERT_TRUE(parse({"--model", "vgg19", "--rate", "100mbit", "--timeout", "60"}, &o, &message)) << message;
  EXPECT_EQ(run_budget_seconds(o, vgg19_bytes, 0.2), 60);
}

RunReport sample() {
  RunReport r;
  r.model = "ResNet-50";
  r.parameters = 25557032;
  r.buckets = 6;
  r.nodes = 4;
  r.link = "network namespaces on a 1gbit switch";
  r.prune = "unstructured, density 0.2";
  r.kept_fraction = 0.2;
  r.iterations = 2;
  ModeResult dense;
  dense.name = "dense";
  dense.ok = true;
  dense.seconds = {1.0, 1.2};
  dense.logical_bytes = 153e6;
  ModeResult compacted = dense;
  compacted.name = "compacted";
  compacted.seconds = {0.25, 0.25};
  compacted.compaction_seconds = {0.01, 0.03};
  compacted.logical_bytes = 30e6;
  compacted.ideal_speedup = 5;
  r.modes = {dense, compacted};
  return r;
}

TEST(Report, TableJsonAndSummaryAgree) {
  const RunReport r = sample();
  const std::string line = summary_line(r);
  EXPECT_NE(line.find("ResNet-50"), std::string::npos) << line;
  EXPECT_NE(line.find("80 % pruned"), std::string::npos) << line;
  EXPECT_NE(line.find("4.4x faster"), std::string::npos) << line;  // median 1.1 s / 0.25 s
  const std::string table = format_table(r);
  EXPECT_NE(table.find("compacted"), std::string::npos);
  EXPECT_NE(table.find("4.40x"), std::string::npos) << table;
  EXPECT_NE(table.find(line), std::string::npos);
  const std::string json = format_json(r);
  EXPECT_NE(json.find("\"mode\":\"compacted\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"ideal_speedup\":5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"exact\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"compaction_seconds\":0.02"), std::string::npos) << json;
  EXPECT_NE(table.find("compacted: 0.020 s of each all-reduce is the gather and scatter"), std::string::npos) << table;
}

TEST(Options, FsdpIsAFlagOffByDefault) {
  Options o;
  std::string message;
  ASSERT_TRUE(parse({}, &o, &message)) << message;
  EXPECT_FALSE(o.fsdp);
  ASSERT_TRUE(
      parse({"--fsdp", "--model", "vit_b_16", "--modes", "dense,compacted,codec", "--nodes", "3"}, &o, &message))
      << message;
  EXPECT_TRUE(o.fsdp);
  EXPECT_EQ(o.nodes, 3);
  EXPECT_NE(usage_text().find("--fsdp "), std::string::npos);
  EXPECT_FALSE(parse({"--fsdp", "--gloo", "--loopback"}, &o, &message));  // Gloo still needs the lab
  EXPECT_NE(message.find("--gloo"), std::string::npos) << message;
}

RunReport fsdp_sample() {
  RunReport r = sample();
  r.fsdp = true;
  r.buckets = 0;
  r.groups = 17;
  r.groups_compacted = 16;
  r.padding_fraction = 0.003;
  r.compacted_share = 0.2025;
  return r;
}

TEST(Report, FsdpRunsSayStepsAndGroups) {
  const RunReport r = fsdp_sample();
  const std::string table = format_table(r);
  EXPECT_NE(table.find("in 17 FSDP groups, sharded on dim 0 with 0.3 % padding"), std::string::npos) << table;
  EXPECT_NE(table.find("2 measured steps per mode"), std::string::npos) << table;
  EXPECT_NE(table.find("compacted: 16 of 17 groups"), std::string::npos) << table;
  EXPECT_NE(table.find("20.2 % of the dense elements"), std::string::npos) << table;
  EXPECT_NE(table.find("0.020 s of each step is the gather and scatter"), std::string::npos) << table;
  EXPECT_NE(table.find("every reduce-scattered shard was checked"), std::string::npos) << table;
  EXPECT_EQ(table.find("DDP bucket"), std::string::npos) << table;
  const std::string line = summary_line(r);
  EXPECT_NE(line.find("FSDP traffic"), std::string::npos) << line;
  EXPECT_NE(line.find("4.4x faster"), std::string::npos) << line;
  EXPECT_NE(line.find("per node and step"), std::string::npos) << line;
  const std::string json = format_json(r);
  EXPECT_NE(json.find("\"collectives\":\"fsdp\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"groups\":17"), std::string::npos) << json;
  EXPECT_NE(json.find("\"groups_compacted\":16"), std::string::npos) << json;
  EXPECT_NE(json.find("\"compacted_share\":0.2025"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"buckets\""), std::string::npos) << json;
  EXPECT_NE(format_json(sample()).find("\"collectives\":\"ddp\""), std::string::npos);
  RunReport stopped = fsdp_sample();
  stopped.iterations = 5;
  stopped.modes[1].ok = false;
  stopped.modes[1].error = "timed out";
  EXPECT_NE(format_table(stopped).find("2 of 5 measured steps finished"), std::string::npos);
}

// How the Gloo peer ran an FSDP step is said under the table and in the JSON, not hidden.
TEST(Report, AModesNoteIsShown) {
  RunReport r = fsdp_sample();
  ModeResult gloo;
  gloo.name = "gloo";
  gloo.ok = true;
  gloo.seconds = {2.0, 2.0};
  gloo.note = "Gloo in torch 1.13 has no reduce_scatter, so each group's gradients were all-reduced instead";
  r.modes.push_back(gloo);
  EXPECT_NE(format_table(r).find("\ngloo: Gloo in torch 1.13 has no reduce_scatter"), std::string::npos)
      << format_table(r);
  EXPECT_NE(format_json(r).find("\"note\":\"Gloo in torch 1.13 has no reduce_scatter"), std::string::npos);
  EXPECT_NE(format_json(sample()).find("\"note\":\"\""), std::string::npos);
}

TEST(Report, MedianIgnoresAStall) {
  ModeResult m;
  m.seconds = {0.3, 2.0, 0.31, 0.29, 0.3};
  EXPECT_DOUBLE_EQ(m.median_seconds(), 0.3);
  EXPECT_DOUBLE_EQ(m.min_seconds(), 0.29);
  m.seconds = {1.0, 1.2};
  EXPECT_DOUBLE_EQ(m.median_seconds(), 1.1);
}

TEST(Report, AFailureIsShownNotSummarised) {
  RunReport r = sample();
  r.modes[1].ok = false;
  r.modes[1].error = "node 2: WRONG RESULT";
  r.failure = "compacted: node 2: WRONG RESULT";
  EXPECT_EQ(summary_line(r), "");
  EXPECT_NE(format_table(r).find("FAILED: compacted: node 2"), std::string::npos);
}

// A mode stopped by the deadline shows what finished: its measured all-reduces, in the table and JSON.
TEST(Report, ATimedOutModeShowsWhatFinished) {
  RunReport r = sample();
  r.iterations = 5;
  r.modes[1].ok = false;
  r.modes[1].seconds = {0.25, 0.27};
  r.modes[1].error = "timed out waiting for node(s) 2 to finish the all-reduce";
  r.failure = "compacted: " + r.modes[1].error;
  const std::string table = format_table(r);
  EXPECT_NE(table.find("2 of 5 measured all-reduces finished"), std::string::npos) << table;
  EXPECT_NE(table.find("0.260 s"), std::string::npos) << table;  // their median
  const std::string json = format_json(r);
  EXPECT_NE(json.find("\"finished_iterations\":2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"seconds\":[0.25,0.27]"), std::string::npos) << json;
}

// A run that failed before checking everything must not claim its sums were exact, and says what
// it was asked to run even when it stopped before the workload existed.
TEST(Report, AFailedRunClaimsNothingItDidNotCheck) {
  RunReport r = sample();
  r.modes.resize(1);
  r.modes[0].ok = false;
  r.modes[0].error = "node 1: cannot load the plugin";
  r.failure = "dense: node 1: cannot load the plugin";
  std::string json = format_json(r);
  EXPECT_NE(json.find("\"exact\":null"), std::string::npos) << json;
  r.wrong_values = true;
  json = format_json(r);
  EXPECT_NE(json.find("\"exact\":false"), std::string::npos) << json;
}

// Byte counts are integers in the JSON, written in full as sieve-info writes its numbers.
TEST(Report, JsonByteCountsAreIntegers) {
  RunReport r = sample();
  r.modes[0].logical_bytes = 519406123;
  r.modes[0].has_kernel = true;
  r.modes[0].kernel_tx_bytes = 530000001;
  const std::string json = format_json(r);
  EXPECT_NE(json.find("\"logical_bytes_per_node\":519406123"), std::string::npos) << json;
  EXPECT_NE(json.find("\"kernel_tx_bytes_per_node\":530000001"), std::string::npos) << json;
  EXPECT_EQ(json.find("e+"), std::string::npos) << json;
}

// The summary quotes the table's per-node bytes, so its figures can be found in the table.
TEST(Report, SummaryBytesAreTheTablesPerNodeBytes) {
  const RunReport r = sample();
  const std::string line = summary_line(r);
  EXPECT_NE(line.find("30.0 MB instead of 153.0 MB"), std::string::npos) << line;
  EXPECT_NE(line.find("per node"), std::string::npos) << line;
}

TEST(Report, DegenerateInputsReadAsSentences) {
  RunReport r = sample();
  r.model = "pruned";  // a --masks file's stem
  r.kept_fraction = 0;
  r.modes[1].ideal_speedup = std::numeric_limits<double>::infinity();
  r.modes[0].logical_bytes = 12;
  r.modes[1].logical_bytes = 0;
  r.parameters = 3;
  const std::string table = format_table(r);
  const std::string line = summary_line(r);
  EXPECT_EQ(table.find("inf"), std::string::npos) << table;
  EXPECT_EQ(table.find("0.0 MB instead of 0.0 MB"), std::string::npos) << table;
  EXPECT_NE(line.find("12 bytes"), std::string::npos) << line;
  EXPECT_EQ(line.find("pruned's"), std::string::npos) << line;
  r.nodes = 1;
  EXPECT_EQ(format_table(r).find("1 nodes"), std::string::npos);
}

// Nothing pruned (--density 1): no claim of being faster, whatever the noise in the timings.
TEST(Report, NothingPrunedClaimsNoSpeedup) {
  RunReport r = sample();
  r.kept_fraction = 1.0;
  r.modes[1].seconds = {0.56, 0.56};
  r.modes[0].seconds = {0.55, 0.55};
  r.modes[1].logical_bytes = r.modes[0].logical_bytes;
  const std::string line = summary_line(r);
  EXPECT_EQ(line.find("faster"), std::string::npos) << line;
  EXPECT_NE(line.find("Nothing of ResNet-50 was pruned"), std::string::npos) << line;
  EXPECT_NE(line.find("0.56 s against 0.55 s dense"), std::string::npos) << line;
}

// Pruned but not faster (a CPU-bound link, say): said plainly, not as "1.0x faster" or "0.9x faster".
TEST(Report, PrunedButNotFasterSaysSo) {
  RunReport r = sample();
  r.modes[1].seconds = {1.15, 1.15};
  std::string line = summary_line(r);
  EXPECT_EQ(line.find("x faster"), std::string::npos) << line;
  EXPECT_NE(line.find("but no faster: 1.15 s against 1.10 s dense"), std::string::npos) << line;
  r.modes[1].seconds = {1.08, 1.08};  // 1.02x rounds to 1.0x
  line = summary_line(r);
  EXPECT_NE(line.find("but no faster"), std::string::npos) << line;
}

}  // namespace
}  // namespace sieve::bench
