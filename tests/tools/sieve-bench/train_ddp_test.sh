#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-bench --train ddp at 2 nodes, 3 steps, DDP's default and Sieve's exact hook: real DDP training
# on Gloo in the namespace lab, and every loss of every rank bit-identical between the two modes
# (a + b = b + a: at 2 ranks compaction changes no sum), and the communication time split into the
# all-reduce alone and the hook's compaction. Skipped (77) where the lab cannot be built
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
# The split of the communication time: the all-reduce alone lies inside each bucket's hook span, so per
# step it is positive and at most the communication time; Sieve's hook spends time around it (gather,
# scatter) on every step.
for mode in (default, sieve):
    comm, alone, compaction = (mode.get(k) for k in ("comm_seconds", "allreduce_seconds", "compaction_seconds"))
    if not alone or not compaction or len(alone) != 3 or len(compaction) != 3:
        problems.append("%s: no per-step all-reduce and compaction times: %s, %s" % (mode["name"], alone, compaction))
    elif not all(0 < a <= c for a, c in zip(alone, comm)):
        problems.append("%s: all-reduce alone %s not within communication %s" % (mode["name"], alone, comm))
    elif mode is sieve and not all(x is not None and x > 0 for x in compaction):
        problems.append("sieve: compaction times %s" % compaction)
    elif "median_allreduce_seconds" not in mode or "median_compaction_seconds" not in mode:
        problems.append("%s: no medians of the split" % mode["name"])
for p in problems:
    print("FAIL: " + p)
if not problems:
    print("2 nodes, 3 steps: Sieve's hook losses bit-identical to DDP's default, %.2f of its wire bytes"
          % (sieve["median_tx_bytes"] / default["median_tx_bytes"]))
sys.exit(1 if problems else 0)
PY
