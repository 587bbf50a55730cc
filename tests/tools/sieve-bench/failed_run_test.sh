#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A failed sieve-bench run claims nothing that did not happen: its JSON says what was asked for
# ("nodes" as requested) and "exact": null, and its progress bar (on a terminal) never shows the
# iterations it did not finish. The second part stops a run by its deadline: at 100 Mbit/s three
# dense all-reduces of ResNet-18 need at least 3 x 5.6 s (the link's rate bounds them), more than
# the 14 s given, so the run cannot finish whatever the machine's speed. Root for that part.
#
#   failed_run_test.sh SIEVE_BENCH
set -uo pipefail
bench=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

json=$("$bench" --nodes 3 --plugin /nonexistent/libnccl-net-sieve.so --json --quiet 2>/dev/null)
[[ $? -ne 0 ]] || fail "a run without its plugin succeeded"
grep -q '"nodes":3' <<<"$json" || fail "the JSON does not say the 3 nodes asked for: $json"
grep -q '"exact":null' <<<"$json" || fail "the JSON claims exactness for a run that checked nothing: $json"

if [[ $(id -u) -eq 0 ]] && command -v script >/dev/null; then
  out=$(script -qec "'$bench' --model resnet18 --rate 100mbit --modes dense --steps 3 --warmup 0 --timeout 14 --json" /dev/null)
  grep -q 'FAILED' <<<"$out" || fail "the stopped run did not say FAILED: $out"
  grep -q '3/3' <<<"$out" && fail "the progress bar showed 3/3 for a run that did not finish them: $out"
  grep -q '"exact":null' <<<"$out" || fail "the stopped run claims exactness: $out"
  grep -Eq '"finished_iterations":[012],' <<<"$out" || fail "the JSON does not say how many finished: $out"
else
  echo "(deadline part skipped: needs root and script)"
fi
[[ $failures -eq 0 ]] && echo "failed runs claim nothing that did not happen"
exit $((failures > 0))
