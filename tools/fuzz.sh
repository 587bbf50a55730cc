#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang in build-fuzz/ and runs each for a short fixed time (20 s)
# under ctest: the codec decoder, codec round trip and safetensors reader (compress/fuzz), the wire
# decoders, the handshake listener, the receive stream and the verbs set-up message (net/fuzz), the
# SIEVE_* registry (plugin/fuzz); the topology file's (topology/fuzz) replays its fixtures and past
# crashes only (tests/topology/CMakeLists.txt says why). Skipped, saying so, without clang.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found, fuzz targets skipped"
  exit 0
fi
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DSIEVE_BUILD_FUZZERS=ON -DSIEVE_BUILD_BENCHMARKS=OFF >/dev/null
fuzzers=(codec_decode codec_roundtrip safetensors wire listener recv_stream verbs_setup topology_file config)
cmake --build "$build" -j "$(nproc)" --target "${fuzzers[@]/#/sieve-fuzz-}"
cd "$build"
ctest --output-on-failure --timeout 120 -R '_fuzz_' --output-junit "$build/ctest-junit.xml"
