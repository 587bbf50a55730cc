#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-perf stopped by SIGTERM (while iperf3 runs) or SIGINT (while its Sieve peers stream) exits
# with 128 + the signal and leaves nothing behind: no namespace of its lab, no lab record under
# /run/sieve-netlab, none of the processes it started (iperf3 -s/-c, its peers). Needs root,
# namespaces and iperf3; skipped otherwise.
#
#   perf_signal_test.sh SIEVE_PERF NETLAB_SH
set -uo pipefail
perf=$1 netlab=$2
[[ $(id -u) -eq 0 ]] && command -v iperf3 >/dev/null && command -v ip >/dev/null ||
  { echo "skipped: needs root, iproute2 and iperf3"; exit 77; }
ip netns add "sieve-signal-probe-$$" 2>/dev/null && ip netns del "sieve-signal-probe-$$" ||
  { echo "skipped: cannot create network namespaces"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Every process below `pid`, recursively.
descendants() {
  local child
  for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}
lab_namespaces() { ip netns list | awk '{ print $1 }' | grep "^sc$1x" || true; }
# A failed check must not leave the lab behind either.
cleanup() {  # pid
  local prefix
  for prefix in $(lab_namespaces "$1" | sed 's/-.*//' | sort -u); do bash "$netlab" --prefix "$prefix" down; done
}

# signal: the signal to send; wait_for: a pattern of a descendant's command line to wait for first.
stop_during() {  # signal wait_for
  local signal=$1 wait_for=$2 pid status waited children="" child
  "$perf" --links veth --seconds 4 --runs 1 >"$work/out" 2>&1 &
  pid=$!
  for ((waited = 0; waited < 300; waited++)); do
    for child in $(descendants "$pid"); do
      grep -qa -- "$wait_for" "/proc/$child/cmdline" 2>/dev/null && children=$(descendants "$pid") && break 2
    done
    sleep 0.1
  done
  [[ -n $children ]] || { fail "$signal: '$wait_for' never started: $(cat "$work/out")"; kill -KILL "$pid"; cleanup "$pid"; return; }
  kill "-$signal" "$pid"
  for ((waited = 0; waited < 300; waited++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    fail "$signal: sieve-perf still runs 30 s later"
    kill -KILL "$pid"
  fi
  wait "$pid"
  status=$?
  [[ $status -eq $((128 + $(kill -l "$signal"))) ]] || fail "$signal: exit status $status: $(cat "$work/out")"
  [[ -z $(lab_namespaces "$pid") ]] || fail "$signal: namespaces left: $(lab_namespaces "$pid")"
  compgen -G "/run/sieve-netlab/sc${pid}x*" >/dev/null && fail "$signal: lab record left in /run/sieve-netlab"
  for child in $children; do
    if grep -qa -e iperf3 -e sieve-perf "/proc/$child/cmdline" 2>/dev/null; then
      fail "$signal: process $child left running: $(tr '\0' ' ' <"/proc/$child/cmdline")"
      kill -KILL "$child" 2>/dev/null
    fi
  done
  cleanup "$pid"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stop_during TERM "iperf3"
stop_during INT "--peer"
[[ $failures -eq 0 ]] && echo "sieve-perf stopped by SIGTERM and SIGINT left nothing behind"
exit $((failures > 0))
