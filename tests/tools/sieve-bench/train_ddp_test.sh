#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-bench --train ddp at 2 nodes, 3 steps, DDP's default and Sieve's exact hook: real DDP training
# on Gloo in the namespace lab, and every loss of every rank bit-identical between the two modes
# (a + b = b + a: at 2 ranks compaction changes no sum). Skipped (77) where the lab cannot be built
# or PYTHON has no PyTorch 2.x with torchvision.
#
#   train_ddp_test.sh SIEVE_BENCH PYTHON
set -uo pipefail
bench=$1 python=$2
[[ $(id -u) -eq 0 ]] || { echo "skipped: the namespace lab needs root"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bench" --train ddp --nodes 2 --steps 3 --train-modes default,sieve --python "$python" --json --quiet \
  --timeout 240 >"$work/out.json" 2>"$work/err"
status=$?
if [[ $status -eq 2 ]] && grep -Eq "needs the namespace lab|could not bring up|cannot run the DDP job|cannot start" "$work/err"; then
  echo "skipped: $(cat "$work/err")"
  exit 77
fi
[[ $status -eq 0 ]] || { echo "FAIL: exit $status"; cat "$work/err" "$work/out.json"; exit 1; }
"$python" - "$work/out.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
modes = {m["name"]: m for m in report["modes"]}
default, sieve = modes["default"], modes["sieve"]
problems = []
if report["nodes"] != 2 or len(sieve["losses"]) != 2 or any(len(l) != 3 for l in sieve["losses"]):
    problems.append("expected 2 ranks x 3 losses: %s" % sieve["losses"])
if not sieve["losses_identical_to_default"]:
    problems.append("Sieve's losses differ from the default's: %s vs %s" % (sieve["losses"], default["losses"]))
stats = sieve.get("hook_stats", {})
if not stats.get("compacted") or stats.get("dense"):
    problems.append("the hook did not compact every bucket: %s" % stats)
if not 0 < sieve["median_tx_bytes"] < 0.5 * default["median_tx_bytes"]:
    problems.append("wire bytes: sieve %s, default %s" % (sieve["median_tx_bytes"], default["median_tx_bytes"]))
for p in problems:
    print("FAIL: " + p)
if not problems:
    print("2 nodes, 3 steps: Sieve's hook losses bit-identical to DDP's default, %.2f of its wire bytes"
          % (sieve["median_tx_bytes"] / default["median_tx_bytes"]))
sys.exit(1 if problems else 0)
PY
