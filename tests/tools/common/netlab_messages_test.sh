#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netlab.sh never fails silently: `status` of a lab that is not up says so (exit 1), and `up` with an
# impairment on a kernel without netem and no sieve-impair anywhere says what is missing (exit 2)
# instead of dying under `set -e` while looking for it. The second part needs root.
#
#   netlab_messages_test.sh NETLAB_SH
set -uo pipefail
netlab=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A copy with no build tree or installation beside it, so nothing can be found but through PATH.
cp "$netlab" "$work/netlab.sh"

out=$(bash "$work/netlab.sh" --prefix "nolab$$" status 2>&1); status=$?
[[ $status -eq 1 && $out == *"no lab 'nolab$$' is up"* ]] || fail "status of a missing lab: exit $status, '$out'"

if [[ $(id -u) -eq 0 ]]; then
  out=$(NETLAB_IMPAIRER=nfqueue PATH=/usr/sbin:/usr/bin:/sbin:/bin bash "$work/netlab.sh" --prefix "nimp$$" up 2 --delay 1ms 2>&1)
  status=$?
  [[ $status -eq 2 && $out == *"impairment unavailable: no netem qdisc in this kernel and no sieve-impair"* ]] ||
    fail "up without sieve-impair: exit $status, '$out'"
  ip netns list | grep -q "^nimp$$-" && fail "the failed lab was left behind"
  bash "$work/netlab.sh" --prefix "nimp$$" down
else
  echo "(impairer part skipped: needs root)"
fi
[[ $failures -eq 0 ]] && echo "netlab.sh says what is wrong"
exit $((failures > 0))
