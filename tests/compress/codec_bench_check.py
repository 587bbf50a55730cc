#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs sieve-codec-bench the way a user does and checks what it says, never how fast it is:
--help lists every option and exits 0; --version names the tool and the project's version; a bad
option value is refused naming the option; the default run is a short sweep that announces its
length, with --full for the whole one; throughput is printed in plain rate units; and the Google
Benchmark library's "built as DEBUG" warning, when it appears, is explained.
Usage: codec_bench_check.py SIEVE_CODEC_BENCH SOURCE_DIR PROJECT_VERSION"""
import os
import re
import subprocess
import sys

bench, source_dir, project_version = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def run(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")}
    try:
        done = subprocess.run([bench, *args], capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        return None, "", f"{' '.join(args)}: still running after 60 s"
    return done.returncode, done.stdout, done.stderr


# 1. --help: every option the source accepts, and where Google Benchmark's own flags are.
with open(os.path.join(source_dir, "compress", "codec_bench", "codec_bench.cc")) as f:
    accepted = set(re.findall(r'"(--[a-z_]+)[="]', f.read()))
check({"--help", "--version", "--full", "--buffer_bytes"} <= accepted, f"options found in the source: {accepted}")
rc, out, err = run("--help")
check(rc == 0, f"--help exited {rc}: {err}")
for option in sorted(accepted):
    check(option in out, f"--help does not list {option}")
check("--benchmark_filter" in out, "--help does not say where Google Benchmark's flags are")

# 2. --version.
rc, out, err = run("--version")
check(rc == 0 and out == f"sieve-codec-bench {project_version}\n", f"--version: exit {rc}, output {out!r}")

# 3. Bad values name the option and exit 2; nothing runs.
for bad in ("--buffer_bytes=lots", "--buffer_bytes=", "--buffer_bytes=12"):
    rc, out, err = run(bad)
    check(rc == 2 and "--buffer_bytes" in err, f"{bad}: exit {rc}, stderr {err!r}")
    check("Benchmark" not in out, f"{bad}: ran anyway")
rc, out, err = run("--frobnicate")
check(rc == 2 and "--frobnicate" in err, f"unknown option: exit {rc}, stderr {err!r}")

# 4. The default sweep is a subset of --full's, which has every density.
rc, out, err = run("--benchmark_list_tests=true")
quick = [line for line in out.splitlines() if line.startswith(("encode/", "decode/"))]
rc_full, out_full, err_full = run("--full", "--benchmark_list_tests=true")
full = [line for line in out_full.splitlines() if line.startswith(("encode/", "decode/"))]
check(rc == 0 and rc_full == 0, f"listing exited {rc} / {rc_full}: {err} {err_full}")
check(0 < len(quick) < len(full), f"default lists {len(quick)} benchmarks, --full {len(full)}")
check(set(quick) <= set(full), "the default sweep has benchmarks --full lacks")
check(any("d=0.35" in name for name in full) and not any("d=0.35" in name for name in quick),
      "--full should add the intermediate densities")

# 5. A short run: announces how many benchmarks and about how long, prints rates as rates.
expected = [name for name in quick if name.startswith("encode/scalar/fp32/")]
rc, out, err = run("--benchmark_filter=^encode/scalar/fp32/")
check(rc == 0, f"a filtered run exited {rc}: {err}")
announce = [line for line in out.splitlines() if line.startswith("sieve-codec-bench: ")]
check(announce and re.search(rf"\b{len(expected)} benchmarks\b.*about \d+ s", announce[0]),
      f"no announcement of the run's length ({len(expected)} benchmarks): {announce}")
rows = [line for line in out.splitlines() if line.startswith("encode/scalar/fp32/")]
check(len(rows) == len(expected) > 0, f"expected {len(expected)} result rows, got {rows}")
for row in rows:
    check("GBps" not in row and "/s/s" not in row, f"a rate of a rate: {row}")
    check(re.search(r"\braw=\d+(\.\d+)?[kMGT]?/s\b", row), f"no raw bytes rate (decimal, /s) in {row}")
    check(re.search(r"\bratio=0\.\d+", row), f"no ratio in {row}")
if "built as DEBUG" in err:
    check("sieve-codec-bench: note:" in err and "not Sieve" in err,
          f"the library's DEBUG warning is left unexplained: {err!r}")

for failure in failures:
    print("FAIL:", failure)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
