#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-perf without root: loopback is measured and reported, the namespace link is reported as not
# run (exit status 1), instead of discarding loopback's results. Needs root to drop to nobody.
#
#   perf_nonroot_test.sh SIEVE_PERF
set -uo pipefail
perf=$1
[[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null && command -v iperf3 >/dev/null ||
  { echo "skipped: needs root, setpriv and iperf3"; exit 77; }
setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null || { echo "skipped: cannot drop to nobody"; exit 77; }
# A build tree under a directory only root may enter (a checkout in /root): nobody cannot read the
# library or the build's CMakeCache.txt there, which says nothing about sieve-perf.
build=$(cd "$(dirname "$perf")/../.." && pwd)
setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$build/CMakeCache.txt" ||
  { echo "skipped: nobody cannot read the build tree $build"; exit 77; }
out=$(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups "$perf" --links loopback,veth --seconds 1 --size 1M 2>&1)
status=$?
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[[ $status -eq 1 ]] || fail "exit status $status, expected 1"
grep -Eq '^\| loopback \| [0-9.]+ \| [0-9.]+ \|' <<<"$out" || fail "no loopback results"
grep -q '^| veth | - |.*ERROR' <<<"$out" || fail "veth not reported as an error"
grep -q 'veth: not run: needs root' <<<"$out" || fail "the reason is not given"
[[ $failures -eq 0 ]] && echo "loopback kept, veth reported" || echo "$out"
exit $((failures > 0))
