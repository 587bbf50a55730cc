#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-impair run by a user without root says it needs root, not that another program holds the
# queue. Needs root to drop to nobody; skipped (77) without.
#
#   nonroot_test.sh SIEVE_IMPAIR
set -uo pipefail
impair=$1
[[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null || { echo "skipped: needs root and setpriv"; exit 77; }
setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$impair" ||
  { echo "skipped: nobody cannot run $impair"; exit 77; }
out=$(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups "$impair" --queue 4242 --duration 1 2>&1)
status=$?
[[ $status -eq 1 ]] || { echo "FAIL: exit status $status, expected 1: $out"; exit 1; }
[[ $out == *"needs root"* ]] || { echo "FAIL: the message does not say it needs root: $out"; exit 1; }
[[ $out != *"another program"* ]] || { echo "FAIL: the message blames another program: $out"; exit 1; }
echo "as nobody: $out"
