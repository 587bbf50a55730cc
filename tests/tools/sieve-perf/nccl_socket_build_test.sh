#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build-nccl-socket-plugin.sh refuses what is not an NCCL source tree: a usage line without its two
# arguments, and the missing file named (before OUT_DIR is created) for a directory that is not one.
#
#   nccl_socket_build_test.sh BUILD_SCRIPT
set -uo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$(bash "$script" 2>&1); status=$?
[[ $status -eq 2 ]] || fail "no arguments: exit status $status, expected 2"
grep -q 'usage: .*NCCL_SRC_DIR OUT_DIR' <<<"$out" || fail "no arguments: no usage line: $out"

mkdir -p "$tmp/not-nccl/src"
out=$(bash "$script" "$tmp/not-nccl" "$tmp/out" 2>&1); status=$?
[[ $status -eq 1 ]] || fail "not an NCCL tree: exit status $status, expected 1"
grep -q "NCCL_SRC_DIR $tmp/not-nccl: missing src/nccl.h.in" <<<"$out" || fail "not an NCCL tree: file not named: $out"
[[ ! -e $tmp/out ]] || fail "not an NCCL tree: OUT_DIR was created"

[[ $failures -eq 0 ]] && echo "bad input refused, named"
exit $((failures > 0))
