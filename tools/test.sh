#!/usr/bin/env bash
# The test command: installs packages, builds, runs the whole suite (every test has its own
# timeout), then runs each libFuzzer target for a short fixed time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/tools/fuzz.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 300 -j 2
