#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Root without CAP_NET_ADMIN (a container): the namespace lab cannot be built, and the tools say why
# instead of failing blindly. sieve-bench runs on loopback when nothing needs the lab (and says so),
# and refuses impairments naming the reason; sieve-perf keeps loopback and reports the namespace
# links as not run, with the system's reason. Needs root and setpriv; skipped otherwise.
#
#   no_net_admin_test.sh SIEVE_BENCH SIEVE_PERF
set -uo pipefail
bench=$1 perf=$2
[[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null && command -v iperf3 >/dev/null ||
  { echo "skipped: needs root, setpriv and iperf3"; exit 77; }
setpriv --bounding-set=-net_admin true 2>/dev/null || { echo "skipped: setpriv cannot drop CAP_NET_ADMIN"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
without() { setpriv --bounding-set=-net_admin "$@"; }
small=(--nodes 2 --model resnet18 --modes dense --steps 1 --warmup 0 --quiet --timeout 60)

out=$(without "$bench" "${small[@]}" 2>&1); status=$?
[[ $status -eq 0 ]] || fail "sieve-bench without CAP_NET_ADMIN: exit $status: $out"
grep -q 'sieve-bench: no namespace lab (cannot create network namespaces here: .\+): the nodes run on loopback' <<<"$out" ||
  fail "sieve-bench did not say why it ran on loopback: $out"
grep -q 'all correct' <<<"$out" || fail "sieve-bench on loopback did not check its sums: $out"

out=$(without "$bench" "${small[@]}" --delay 1ms 2>&1); status=$?
[[ $status -eq 2 ]] || fail "sieve-bench --delay without CAP_NET_ADMIN: exit $status, expected 2: $out"
grep -q -- '--delay/--jitter/--loss/--reorder need the namespace lab (cannot create network namespaces here: .\+)' <<<"$out" ||
  fail "sieve-bench --delay: the reason is missing: $out"

out=$(without "$perf" --links loopback,veth --seconds 1 --size 1M 2>&1); status=$?
[[ $status -eq 1 ]] || fail "sieve-perf without CAP_NET_ADMIN: exit $status, expected 1: $out"
grep -Eq '^\| loopback \| [0-9.]+ \| [0-9.]+ \|' <<<"$out" || fail "sieve-perf: no loopback results: $out"
grep -q 'veth: not run: cannot create network namespaces here: [^ ].*' <<<"$out" ||
  fail "sieve-perf: the namespace link's reason is empty: $out"
# As Docker starts a container: without CAP_SYS_ADMIN either, `ip netns add` itself fails.
out=$(setpriv --bounding-set=-net_admin,-sys_admin "$perf" --links veth --seconds 1 --size 1M 2>&1)
grep -q 'veth: not run: cannot create network namespaces here: [^ ].*' <<<"$out" ||
  fail "sieve-perf without CAP_SYS_ADMIN: the reason is empty: $out"
[[ $failures -eq 0 ]] && echo "without CAP_NET_ADMIN the tools say why, and sieve-bench runs on loopback"
exit $((failures > 0))
