#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Gloo peer's FSDP step (tools/share/gloo_allreduce.py --shards) on loopback, 3 ranks: every rank
# reports every all-gathered element and its reduced shard exact, how it reduced (reduce_scatter,
# or all_reduce where this Gloo has none), and its all-gathers' share of the step. Skipped (77)
# where PYTHON (CMake's SIEVE_PYTHON) has no torch.
#
#   gloo_fsdp_test.sh GLOO_ALLREDUCE_PY PYTHON
set -uo pipefail
script=$1
python=$2
"$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null || { echo "no torch with Gloo"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$((20000 + $$ % 20000))
# Shards that are not a multiple of anything: a 1-element one, and one of 40001.
for rank in 0 1 2; do
  timeout 120 "$python" "$script" --rank "$rank" --world 3 --master 127.0.0.1 --port "$port" --ifname lo \
    --shards 1000,1,40001 --iters 2 --warmup 1 --timeout 100 >"$dir/$rank.json" 2>"$dir/$rank.err" &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
failures=0
for rank in 0 1 2; do
  out=$(cat "$dir/$rank.json")
  grep -q '"exact":true' <<<"$out" || { echo "FAIL: rank $rank not exact: $out $(cat "$dir/$rank.err")"; failures=$((failures + 1)); }
  grep -Eq '"reduce_scatter":"(reduce_scatter|all_reduce)"' <<<"$out" || { echo "FAIL: rank $rank does not say how it reduced: $out"; failures=$((failures + 1)); }
  grep -Eq '"all_gather_seconds":\[[0-9.]+,[0-9.]+\]' <<<"$out" || { echo "FAIL: rank $rank: no all-gather share per step: $out"; failures=$((failures + 1)); }
done
[[ $status -eq 0 && $failures -eq 0 ]] || exit 1
echo "the Gloo peer's FSDP step is exact on every rank"
