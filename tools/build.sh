#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds Sieve into build/ (or $BUILD_DIR). Extra arguments go to cmake. Compiles go
# through ccache when it is installed (CMakeLists.txt sets that up, SIEVE_CCACHE).
# (Not SIEVE_* names: those belong to the plugin's registry, which reports unknown ones.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
