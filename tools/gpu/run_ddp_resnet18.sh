#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The end-to-end check of the collective proxy on a GPU machine: a 2-rank PyTorch DDP job (both ranks
# on GPU 0, distinct NCCL_HOSTIDs, all traffic through the Sieve net plugin) trains a ResNet-18 pruned
# 80 % for STEPS steps, once plainly and once with the proxy (LD_PRELOAD + published masks). Prints
# the largest loss difference, the compacted-collective count and the wire-byte ratio.
#
#   tools/gpu/run_ddp_resnet18.sh [BUILD_DIR (build)] [STEPS (300)]
# Needs python3 with a CUDA-enabled torch (PYTHON=... to choose). Exit 77 = skipped (no GPU/torch).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
steps=${2:-300}
python=${PYTHON:-python3}
lib=$(realpath "$build/plugin/libnccl-net-sieve.so")
nm -D --defined-only "$lib" | grep -q ' ncclAllReduce$' || { echo "$lib has no proxy (built without CUDA)"; exit 1; }
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "SKIP: $python has no CUDA-enabled torch"; exit 77
fi
out=$(mktemp -d /tmp/sieve-ddp.XXXXXX)

# run LABEL [extra env...] -- [extra script args...]
run() {
  local label=$1; shift
  local envs=() args=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  args=("$@")
  local port=$((29500 + RANDOM % 2000)) pids=()
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port LOCAL_DEVICE=0 \
      NCCL_HOSTID=sieve-ddp-$r NCCL_NET_PLUGIN="$lib" NCCL_NET=Sieve NCCL_MNNVL_ENABLE=0 \
      NCCL_SOCKET_IFNAME=lo SIEVE_SOCKET_IFNAME=lo CUBLAS_WORKSPACE_CONFIG=:4096:8 "${envs[@]}" \
      timeout 3600 "$python" tools/gpu/ddp_resnet18.py --steps "$steps" --out "$out/$label-$r.json" "${args[@]}" \
      > "$out/$label-$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$out/$label-0.log"
  if [[ $rc -ne 0 ]]; then echo "run '$label' failed (rc $rc); logs in $out"; cat "$out/$label-1.log"; exit 1; fi
}

echo "== dense (NCCL through the Sieve net plugin, no proxy)"
run dense --
echo "== sieve (LD_PRELOAD proxy, masks published)"
run sieve "LD_PRELOAD=$lib" -- --sieve

"$python" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda label, r: json.load(open("%s/%s-%d.json" % (out, label, r)))
dense, sieve = [load("dense", r) for r in (0, 1)], [load("sieve", r) for r in (0, 1)]
diff = max(abs(a - b) for a, b in zip(dense[0]["losses"], sieve[0]["losses"]))
wire = lambda runs: sum(r["stats"].get("bytes_wire_sent", 0) for r in runs)
print(json.dumps({
    "steps": len(dense[0]["losses"]), "density": sieve[0]["density"],
    "final_loss_dense": dense[0]["losses"][-1], "final_loss_sieve": sieve[0]["losses"][-1],
    "max_loss_difference": diff,
    "collectives_compacted": [r["stats"].get("collectives_compacted") for r in sieve],
    "collectives_dense": [r["stats"].get("collectives_dense") for r in sieve],
    "wire_bytes_dense": wire(dense), "wire_bytes_sieve": wire(sieve),
    "wire_ratio": wire(sieve) / wire(dense) if wire(dense) else None}, indent=1))
if not all(r["stats"].get("collectives_compacted") for r in sieve):
    print("NOTE: nothing was compacted: is torch's NCCL linked statically (no interposition possible)?")
PY
