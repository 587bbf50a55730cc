#!/usr/bin/env bash
# The test command: installs packages, builds, runs the whole suite. Every test has its own timeout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
cd "${SIEVE_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 300 -j 2
