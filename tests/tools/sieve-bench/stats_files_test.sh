#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SIEVE_STATS_FILE from sieve-bench's nodes, as an operator sets it: every node's file holds the
# bytes it really moved (the nodes end with _exit, which skips static destructors, so the totals
# must be written when the plugin's connections close and NCCL finalizes it), and the run leaves
# only the files asked for: no lock files, nothing beside the directory.
#
#   stats_files_test.sh SIEVE_BENCH
set -uo pipefail
bench=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # SIEVE_STATS_FILE value
  SIEVE_STATS_FILE=$1 SIEVE_STATS_FORMAT=prometheus "$bench" --loopback --nodes 2 --model resnet18 --modes dense \
    --steps 1 --warmup 0 --rate none --quiet --timeout 60 >"$work/out" 2>&1 || fail "sieve-bench failed: $(cat "$work/out")"
}

# One file per node (%p); ResNet-18's fp32 gradients are 46.8 MB, of which a node of two sends half
# per all-reduce's reduce-scatter and half in its all-gather: more than 40 MB each.
mkdir "$work/per-pid"
run "$work/per-pid/node-%p.prom"
files=("$work"/per-pid/node-*.prom)
[[ ${#files[@]} -eq 2 ]] || fail "expected 2 node files, found: $(ls -A "$work/per-pid")"
for f in "${files[@]}"; do
  sent=$(awk '/^sieve_logical_sent_bytes_total\{/ { print $2 }' "$f")
  [[ -n $sent && $sent -gt 40000000 ]] || fail "$(basename "$f"): $(grep "^sieve_logical_sent_bytes_total" "$f")"
done

# One name for both nodes: the first holds it, the other writes its own; no lock file stays.
mkdir "$work/shared"
run "$work/shared/node.prom"
[[ -s $work/shared/node.prom ]] || fail "node.prom was not written: $(ls -A "$work/shared")"
ls "$work/shared" | grep -Eq '^node\.[0-9]+\.prom$' || fail "the second node's node.PID.prom is missing: $(ls -A "$work/shared")"
leftover=$(ls -A "$work/shared" | grep -Ev '^node(\.[0-9]+)?\.prom$')
[[ -z $leftover ]] || fail "files nobody asked for: $leftover"

# A directory named as the file: refused with the reason, nothing written inside or beside it.
mkdir "$work/dir" "$work/dir/textfile"
run "$work/dir/textfile"
grep -q "SIEVE_STATS_FILE=$work/dir/textfile: $work/dir/textfile is a directory: name a file in it" "$work/out" ||
  fail "no clear warning for a directory: $(cat "$work/out")"
[[ $(ls -A "$work/dir") == textfile && -z $(ls -A "$work/dir/textfile") ]] ||
  fail "files written for a directory: $(ls -AR "$work/dir")"
[[ $failures -eq 0 ]] && echo "every node's file holds its real totals; nothing else was written"
exit $((failures > 0))
