#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-bench --train fsdp2 --json prints one JSON object, as --train ddp --json does, not the table:
# 2 nodes, 2 steps, FSDP2 as is and with sieve.fsdp, every rank's losses and Sieve's bit-identical to
# FSDP2's (at 2 ranks compaction changes no sum). Skipped (77) where the lab cannot be built or PYTHON
# has no PyTorch 2.x.
#
#   train_fsdp2_json_test.sh SIEVE_BENCH PYTHON
set -uo pipefail
bench=$1 python=$2
[[ $(id -u) -eq 0 ]] || { echo "skipped: the namespace lab needs root"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bench" --train fsdp2 --nodes 2 --steps 2 --python "$python" --json --quiet --timeout 400 \
  >"$work/out.json" 2>"$work/err"
status=$?
if [[ $status -eq 2 ]] && grep -Eq "needs the namespace lab|could not bring up|is not an executable" "$work/err"; then
  echo "skipped: $(cat "$work/err")"
  exit 77
fi
[[ $status -eq 0 ]] || { echo "FAIL: exit $status"; cat "$work/err" "$work/out.json"; exit 1; }
"$python" - "$work/out.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
try:
    report = json.loads(text)
except ValueError as error:
    sys.exit("FAIL: not one JSON object (%s):\n%s" % (error, text[:2000]))
modes = {m["name"]: m for m in report["modes"]}
problems = []
if report["train"] != "fsdp2" or report["nodes"] != 2 or set(modes) != {"fsdp2", "sieve"}:
    problems.append("train %s, nodes %s, modes %s" % (report["train"], report["nodes"], sorted(modes)))
sieve = modes.get("sieve", {})
if len(sieve.get("losses", [])) != 2 or any(len(l) != 2 for l in sieve["losses"]):
    problems.append("expected 2 ranks x 2 losses: %s" % sieve.get("losses"))
if not sieve.get("losses_identical_to_fsdp2"):
    problems.append("Sieve's losses differ from FSDP2's: %s vs %s" % (sieve.get("losses"), modes["fsdp2"]["losses"]))
for p in problems:
    print("FAIL: " + p)
if not problems:
    print("--train fsdp2 --json: one object, 2 nodes x 2 steps, Sieve's losses bit-identical to FSDP2's")
sys.exit(1 if problems else 0)
PY
