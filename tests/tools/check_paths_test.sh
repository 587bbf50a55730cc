#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/check-paths.py on a small repository made here: a comment naming a file that moved fails,
# naming the file and line; existing files, build outputs named after their folder, paths from the
# naming file's folder and system headers pass.
#
#   check_paths_test.sh CHECK_PATHS_PY
set -uo pipefail
check=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" && git init -q . && mkdir -p net/tcp tools/sieve-info plugin/net
echo '// the codec' >net/tcp/comm.cc
cat >plugin/net/shim.cc <<'CC'
// SPDX-License-Identifier: Apache-2.0
#include <net/if.h>
// Framing is in net/tcp/comm.cc; the tool is tools/sieve-info/sieve-info; see also net/shim.cc.
CC
mkdir -p plugin/net/net && touch plugin/net/net/shim.cc  # "net/shim.cc" from plugin/net/
git add -A
out=$(python3 "$check" "$work" 2>&1) || { echo "FAIL: a tree whose paths all exist was refused: $out"; exit 1; }
echo '// the tests are in tests/net/tcp/comm_test.cc' >>net/tcp/comm.cc
git add -A
out=$(python3 "$check" "$work" 2>&1)
status=$?
[[ $status -eq 1 && $out == *"net/tcp/comm.cc:2: tests/net/tcp/comm_test.cc"* ]] ||
  { echo "FAIL: a stale path passed (exit $status): $out"; exit 1; }
echo "OK: stale paths fail, existing ones pass"
