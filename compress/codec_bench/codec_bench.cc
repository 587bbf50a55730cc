// SPDX-License-Identifier: Apache-2.0
// sieve-codec-bench: encode and decode throughput of the wire codec per core (one thread), by SIMD
// level, element type (fp32 / bf16) and density (fraction of nonzero elements), plus the encoded
// size as a fraction of the raw bytes ("ratio" counter). Buffers are 1 MiB by default (cache
// resident, so the codec rather than DRAM is measured); --buffer_bytes=N changes that. The default
// run is a short sweep (five densities, 0.1 s each) that announces its length; --full runs the
// whole one (nine densities, Google Benchmark's default time each, about two minutes).
//
//   sieve-codec-bench [--full] [--buffer_bytes=N] [Google Benchmark flags, e.g. --benchmark_filter=avx2]
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/codec_bench/sparse_data.h"

namespace {

using sieve::compress::CodecOptions;
using sieve::compress::DecodeStatus;
using sieve::compress::SimdLevel;
using sieve::compress::sparse_data;

size_t g_buffer_bytes = 1 << 20;

void report(benchmark::State& state, size_t raw, size_t encoded) {
  // Raw bytes per second, decimal (the unit of the project's GB/s bar): the library divides a rate
  // counter by the time and prints it with an SI prefix and "/s", e.g. "raw=8.1G/s". (Its own
  // bytes_per_second is binary, so it is not used: two units side by side misled.)
  state.counters["raw"] = benchmark::Counter(double(state.iterations()) * double(raw), benchmark::Counter::kIsRate,
                                             benchmark::Counter::kIs1000);
  state.counters["ratio"] = double(encoded) / double(raw);
}

void bench_encode(benchmark::State& state, SimdLevel level, size_t element, double density) {
  const auto src = sparse_data(g_buffer_bytes, element, density, /*seed=*/42);
  std::vector<uint8_t> dst(sieve::compress::encode_bound(src.size()));
  CodecOptions o;
  o.simd = level;
  size_t written = 0;
  for (auto _ : state) {
    written = sieve::compress::encode(src.data(), src.size(), dst.data(), dst.size(), o);
    benchmark::DoNotOptimize(dst.data());
  }
  report(state, src.size(), written);
}

void bench_decode(benchmark::State& state, SimdLevel level, size_t element, double density) {
  const auto src = sparse_data(g_buffer_bytes, element, density, /*seed=*/42);
  std::vector<uint8_t> frame(sieve::compress::encode_bound(src.size())), out(src.size());
  CodecOptions o;
  o.simd = level;
  frame.resize(sieve::compress::encode(src.data(), src.size(), frame.data(), frame.size(), o));
  for (auto _ : state) {
    size_t len = 0;
    if (sieve::compress::decode(frame.data(), frame.size(), out.data(), out.size(), &len, level) != DecodeStatus::kOk ||
        len != src.size()) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (out != src) state.SkipWithError("decoded bytes differ from the input");
  report(state, src.size(), frame.size());
}

// Reports the library's context as the console reporter does and, when the distribution's Google
// Benchmark says it "was built as DEBUG", says whose build that is: the warning would otherwise
// read as if Sieve's codec were measured unoptimised.
class ExplainingReporter : public benchmark::ConsoleReporter {
 public:
  explicit ExplainingReporter(OutputOptions options) : ConsoleReporter(options) {}
  bool ReportContext(const Context& context) override {
    std::ostream& err = GetErrorStream();
    std::ostringstream captured;
    SetErrorStream(&captured);
    const bool ok = ConsoleReporter::ReportContext(context);
    SetErrorStream(&err);
    err << captured.str();
    if (captured.str().find("built as DEBUG") != std::string::npos)
      err << "sieve-codec-bench: note: that warning is about the Google Benchmark library this tool links (the "
             "distribution's package, built without NDEBUG), not Sieve: the codec and the timing loop around it are "
             "compiled into this tool as "
          << SIEVE_BUILD_TYPE << ".\n";
    return ok;
  }
};

constexpr double kQuickDensities[] = {0.05, 0.25, 0.5, 0.75, 0.95};
constexpr double kFullDensities[] = {0.05, 0.15, 0.25, 0.35, 0.5, 0.65, 0.75, 0.85, 0.95};
constexpr double kQuickMinTime = 0.1;    // seconds per benchmark in the default sweep
constexpr double kLibraryMinTime = 0.5;  // Google Benchmark's own default (--full)
constexpr size_t kMinBufferBytes = 64;
constexpr size_t kMaxBufferBytes = size_t{1} << 30;

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: sieve-codec-bench [--full] [--buffer_bytes=N] [Google Benchmark flags]\n"
               "       sieve-codec-bench --help | --version\n"
               "\n"
               "Encode and decode throughput of Sieve's wire codec on one core, by SIMD level, element type\n"
               "(fp32, bf16) and density; 'raw' is decimal bytes per second of uncompressed data, 'ratio' the\n"
               "frame's size over the raw size.\n"
               "\n"
               "  --quick           the default: densities 0.05 0.25 0.5 0.75 0.95, %.1f s per benchmark\n"
               "                    (its length is printed first; seconds on a CPU with AVX2)\n"
               "  --full            densities 0.05 to 0.95 in nine steps, %.1f s per benchmark (about two minutes)\n"
               "  --buffer_bytes=N  buffer size, %zu to 1G bytes, K/M/G suffixes (default 1M: cache resident)\n"
               "  -h, --help        this text\n"
               "  --version         the tool and Sieve's version\n"
               "\n"
               "Google Benchmark's own flags (--benchmark_*) pass through, e.g. --benchmark_filter=REGEX,\n"
               "--benchmark_min_time=SECONDS, --benchmark_format=json, --benchmark_list_tests=true,\n"
               "--benchmark_color=false, --benchmark_counters_tabular=true;\n"
               "the library's documentation lists the others.\n",
               kQuickMinTime, kLibraryMinTime, kMinBufferBytes);
}

// "4096", "64K", "1M", "1G" (binary multiples); false on anything else.
bool parse_bytes(const std::string& text, size_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  const std::string suffix = end;
  unsigned shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) return false;
  if (value > (kMaxBufferBytes >> shift)) return false;
  *out = static_cast<size_t>(value) << shift;
  return true;
}

struct Options {
  size_t buffer_bytes = size_t{1} << 20;
  bool full = false;
  std::string filter;          // --benchmark_filter, to announce what will run
  double min_time = -1;        // --benchmark_min_time when given
  bool console_output = true;  // no --benchmark_format other than console
  bool list_only = false;      // --benchmark_list_tests=true
  // What the library's own console reporter would use: colour on a terminal, tables when asked.
  benchmark::ConsoleReporter::OutputOptions console_options =
      isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Color : benchmark::ConsoleReporter::OO_None;
};

// Returns -1 to go on, else the exit status. Google Benchmark's flags are kept in `library_args`.
int parse_options(int argc, char** argv, Options* o, std::vector<char*>* library_args) {
  library_args->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value_of = [&](const char* flag) { return arg.substr(std::strlen(flag)); };
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else if (arg == "--version") {
      std::printf("sieve-codec-bench %s\n", SIEVE_VERSION_STRING);  // CMake's project version
      return 0;
    } else if (arg == "--full") {
      o->full = true;
    } else if (arg == "--quick") {
      o->full = false;
    } else if (arg.rfind("--buffer_bytes=", 0) == 0 || arg == "--buffer_bytes") {
      const std::string value = arg == "--buffer_bytes" ? "" : value_of("--buffer_bytes=");
      if (!parse_bytes(value, &o->buffer_bytes) || o->buffer_bytes < kMinBufferBytes) {
        std::fprintf(stderr, "sieve-codec-bench: --buffer_bytes=%s: expected %zu to 1G bytes (K, M, G suffixes)\n",
                     value.c_str(), kMinBufferBytes);
        return 2;
      }
    } else if (arg.rfind("--benchmark_", 0) == 0) {
      if (arg.rfind("--benchmark_filter=", 0) == 0) o->filter = value_of("--benchmark_filter=");
      if (arg.rfind("--benchmark_min_time=", 0) == 0)
        o->min_time = std::atof(value_of("--benchmark_min_time=").c_str());
      if (arg.rfind("--benchmark_format=", 0) == 0) o->console_output = value_of("--benchmark_format=") == "console";
      if (arg == "--benchmark_list_tests=true" || arg == "--benchmark_list_tests") o->list_only = true;
      if (arg == "--benchmark_color=false") o->console_options = benchmark::ConsoleReporter::OO_None;
      if (arg == "--benchmark_counters_tabular=true")
        o->console_options =
            benchmark::ConsoleReporter::OutputOptions(o->console_options | benchmark::ConsoleReporter::OO_Tabular);
      library_args->push_back(argv[i]);
    } else {
      std::fprintf(stderr, "sieve-codec-bench: unknown option '%s' (--help lists them)\n", argv[i]);
      return 2;
    }
  }
  return -1;
}

// Google Benchmark's filter syntax: a regex, '-' in front to exclude; empty or "all" = everything.
bool selected(const std::string& name, const std::string& filter) {
  if (filter.empty() || filter == "all" || filter == ".") return true;
  const bool negative = filter[0] == '-';
  const bool match = std::regex_search(name, std::regex(negative ? filter.substr(1) : filter));
  return negative ? !match : match;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::vector<char*> args;
  const int status = parse_options(argc, argv, &options, &args);
  if (status >= 0) return status;
  g_buffer_bytes = options.buffer_bytes;

  // Without --benchmark_min_time the default sweep sets its own short time per benchmark.
  const double min_time = options.min_time > 0 ? options.min_time : options.full ? kLibraryMinTime : kQuickMinTime;
  size_t count_selected = 0;
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!sieve::compress::simd_level_supported(level)) {
      std::fprintf(stderr, "sieve-codec-bench: this CPU has no %s; skipped\n", sieve::compress::simd_level_name(level));
      continue;
    }
    for (size_t element : {size_t{4}, size_t{2}}) {
      const double* begin = options.full ? std::begin(kFullDensities) : std::begin(kQuickDensities);
      const double* end = options.full ? std::end(kFullDensities) : std::end(kQuickDensities);
      for (const double* d = begin; d != end; ++d) {
        const char* type = element == 4 ? "fp32" : "bf16";
        for (const char* op : {"encode", "decode"}) {
          char name[96];
          std::snprintf(name, sizeof name, "%s/%s/%s/d=%.2f", op, sieve::compress::simd_level_name(level), type, *d);
          if (std::strcmp(op, "encode") == 0) benchmark::RegisterBenchmark(name, bench_encode, level, element, *d);
          else benchmark::RegisterBenchmark(name, bench_decode, level, element, *d);
          if (selected(name, options.filter)) ++count_selected;
        }
      }
    }
  }
  // The short sweep's time per benchmark, as the library's own flag (so names stay the same).
  std::string quick_min_time = "--benchmark_min_time=" + std::to_string(kQuickMinTime);
  if (options.min_time <= 0 && !options.full) args.push_back(quick_min_time.data());
  int count = int(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 2;
  if (!options.list_only) {
    // Each benchmark runs its minimum time about twice over (the library's calibration), plus set-up.
    // The library counts CPU time, so on a busy machine the wall-clock time is longer.
    const double seconds = double(count_selected) * (2 * min_time + 0.05);
    std::printf("sieve-codec-bench: %zu benchmarks (%s sweep), %.1f s each: about %.0f s on an idle core%s\n",
                count_selected, options.full ? "full" : "short", min_time, seconds < 1 ? 1.0 : seconds,
                options.full ? "" : "; --full runs every density (about two minutes)");
    std::printf(
        "buffer: %zu bytes; one thread; raw = decimal bytes per second of uncompressed data; "
        "ratio = frame bytes / raw bytes\n",
        g_buffer_bytes);
    std::fflush(stdout);
  }
  ExplainingReporter reporter(options.console_options);
  if (options.console_output) benchmark::RunSpecifiedBenchmarks(&reporter);
  else benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
