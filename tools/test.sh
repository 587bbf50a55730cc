#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: installs packages, checks the formatting of the sources (tools/check-format.sh),
# builds, runs each libFuzzer target for a short fixed time,
# builds the GPU kit (where nvcc is; its tests, label gpu-kit, then find it built instead of
# compiling it beside the other tests), runs the whole suite (every test has its own timeout), then
# the collective proxy's tests again under ThreadSanitizer and AddressSanitizer (those tests only,
# in their own build trees, to keep CI short).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/tools/install-deps.sh"
"$root/tools/check-format.sh"
"$root/tools/build.sh"
"$root/tools/fuzz.sh"
kit_status=0
GPU_KIT_BUILD_DIR="$build/gpu-kit-build" "$root/tools/gpu/bundle.sh" "$build/gpu-kit" || kit_status=$?
((kit_status == 0 || kit_status == 77)) || exit "$kit_status"  # 77: no CUDA toolkit, no kit
# Label flaky: tests known to hang intermittently for a reason outside Sieve (each says why); run
# them with `ctest -L flaky`.
(cd "$build" && ctest --output-on-failure --timeout 300 -j 2 -LE flaky)
"$root/tools/sanitize-proxy.sh"
