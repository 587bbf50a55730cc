#!/usr/bin/env bash
# The test command: installs packages, builds, runs the whole suite (every test has its own
# timeout), runs each libFuzzer target for a short fixed time, then the collective proxy's tests
# again under ThreadSanitizer and AddressSanitizer (those tests only, in their own build trees, to
# keep CI short).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh" python3-torch
"$root/tools/build.sh"
"$root/tools/fuzz.sh"
build=${BUILD_DIR:-$root/build}
(cd "$build" && ctest --output-on-failure --timeout 300 -j 2)
"$root/tools/sanitize-proxy.sh"
