#!/usr/bin/env bash
# Configures and builds Sieve into build/ (or $BUILD_DIR). Extra arguments go to cmake. Compiles go
# through ccache when it is installed, so a second clone or a rebuild on the same machine is quick.
# (Not SIEVE_* names: those belong to the plugin's registry, which reports unknown ones.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
