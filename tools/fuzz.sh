#!/usr/bin/env bash
# Builds the libFuzzer targets (codec decoder, codec round trip, safetensors reader) with clang in
# build-fuzz/ and runs each for a short fixed time under ctest. Skipped, saying so, without clang.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found, fuzz targets skipped"
  exit 0
fi
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DSIEVE_BUILD_FUZZERS=ON -DSIEVE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target sieve-fuzz-codec_decode sieve-fuzz-codec_roundtrip sieve-fuzz-safetensors
cd "$build"
ctest --output-on-failure --timeout 120 -R compress_fuzz
