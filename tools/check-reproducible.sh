#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the wheel's library twice from this checkout, in two fresh build trees at different places and
# depths, one compiled through ccache (which names sources relative to the build tree) and one without
# (absolute names), and compares the two libraries and the two wheels byte for byte. Not part of the
# test suite: two full builds take 10 to 20 minutes on two cores (CONTRIBUTING.md, "Reproducible builds").
#
#   tools/check-reproducible.sh [KEY=VALUE ...]     (KEY=VALUE: pip --config-settings, as tools/build-wheel.sh)
#
# Exit status 0 when both are identical; 1, with the differing sections, when not. Uses $PYTHON_VENV
# (default /opt/sieve/venv) for scikit-build-core; nothing is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON_VENV:-/opt/sieve/venv}/bin/python
work=$(mktemp -d /tmp/sieve-repro.XXXXXX)
trap 'rm -rf "$root/build/repro-near"' EXIT
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
export CCACHE_NAMESPACE=${CCACHE_NAMESPACE:-sieve-wheel}  # as tools/build-wheel.sh, which says why

build() {  # build NAME BUILD_TREE [ENV...]: the wheel into $work/NAME
  local name=$1 tree=$2
  shift 2
  local settings=("--config-settings=build-dir=$tree")
  for setting in "${extra[@]}"; do settings+=("--config-settings=$setting"); done
  echo "check-reproducible: building $name in $tree"
  env "$@" "$python" -m pip wheel --no-deps --no-build-isolation --disable-pip-version-check --quiet \
    -w "$work/$name" "${settings[@]}" "$root"
  mkdir -p "$work/$name/unpacked"
  "$python" -m zipfile -e "$work/$name"/*.whl "$work/$name/unpacked"
}
extra=("$@")
rm -rf "$root/build/repro-near"
build near "$root/build/repro-near"
build far "$work/far/deeper/tree" CCACHE_DISABLE=1

library=sieve/libnccl-net-sieve.so
sha256sum "$work"/near/*.whl "$work"/far/*.whl "$work/near/unpacked/$library" "$work/far/unpacked/$library"
if cmp -s "$work/near/unpacked/$library" "$work/far/unpacked/$library" &&
  cmp -s "$work"/near/*.whl "$work"/far/*.whl; then
  echo "check-reproducible: the two builds are identical"
  rm -rf "$work"
  exit 0
fi
echo "check-reproducible: the two builds differ; sections of the library that differ:" >&2
for side in near far; do
  readelf -SW "$work/$side/unpacked/$library" | awk '$2 ~ /^\./ {print $2, $6}' >"$work/$side.sections"
done
diff "$work/near.sections" "$work/far.sections" >&2 || true
echo "check-reproducible: both builds are in $work" >&2
exit 1
