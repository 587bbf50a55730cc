#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A lab whose owner died without `down` (SIGKILL, OOM, a test timeout) is reported orphaned by
# `status --all`, removed with its sieve-impair daemons by the next `up`, and `down --all` removes
# every recorded lab. Runs in a private state directory, so it never touches other callers' labs.
#
#   netlab_orphan_test.sh NETLAB_SH [SIEVE_IMPAIR]
set -uo pipefail
netlab=$1 impair=${2:-}
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root"; exit 77; }
export NETLAB_STATE_DIR
NETLAB_STATE_DIR=$(mktemp -d)
dead=nlo$$d live=nlo$$l
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has_ns() { ip netns list | awk '{print $1}' | grep -qx "$1"; }
cleanup() {
  bash "$netlab" --prefix "$dead" down; bash "$netlab" --prefix "$live" down
  [[ -n ${owner:-} ]] && kill -9 "$owner" 2>/dev/null
  rm -rf "$NETLAB_STATE_DIR"
}
trap cleanup EXIT

sleep 600 & owner=$!
impair_args=()
if [[ -n $impair && -x $impair ]]; then
  export NETLAB_IMPAIRER=nfqueue  # sieve-impair even where netem exists
  impair_args=(--delay 1ms --impair "$impair")
fi
bash "$netlab" --prefix "$dead" up 2 --owner "$owner" "${impair_args[@]}" >/dev/null || { echo "FAIL: up"; exit 1; }
impairer=""
[[ ${#impair_args[@]} -gt 0 ]] && impairer=$(<"$NETLAB_STATE_DIR/$dead/impair-n0.pid")
kill -9 "$owner"; wait "$owner" 2>/dev/null; owner=""

bash "$netlab" status --all | grep -q "^$dead: .*orphaned" || fail "status --all does not report $dead as orphaned: $(bash "$netlab" status --all)"
bash "$netlab" --prefix "$live" up 2 --owner $$ >/dev/null 2>&1 || fail "up of a second lab failed"
has_ns "$dead-n0" && fail "the next up left the orphaned lab's namespaces"
[[ -d $NETLAB_STATE_DIR/$dead ]] && fail "the next up left the orphaned lab's record"
[[ -n $impairer ]] && kill -0 "$impairer" 2>/dev/null && fail "the next up left the orphaned lab's sieve-impair ($impairer)"
has_ns "$live-n0" || fail "the second lab is not up"
bash "$netlab" status --all | grep -q "^$live: .*running" || fail "status --all does not show $live's live owner"

bash "$netlab" down --all
has_ns "$live-n0" && fail "down --all left $live"
[[ $failures -eq 0 ]] && echo "orphaned labs found and removed"
exit $((failures > 0))
