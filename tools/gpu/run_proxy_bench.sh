#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmarks of the collective proxy on a GPU machine (one run, ratios):
#  1. gather/scatter kernels against a device-to-device copy (bar: >= 0.80);
#  2. 2-rank all-reduce of COUNT f32 over a shaped 1 Gbit/s link (netlab namespaces, both ranks on
#     GPU 0 with distinct NCCL_HOSTIDs): dense vs compacted at d = 0.5, 0.2, 0.1 through the Sieve net
#     plugin (bar: time <= 1.15 x d x dense + fixed latency), then the same over NCCL's own socket
#     transport (Sieve dense vs NCCL Socket dense).
#   tools/gpu/run_proxy_bench.sh [BUILD_DIR (build)] [COUNT (16777216)] [RATE (1gbit)]
# Needs root (network namespaces). Exit 77 = skipped (no GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
count=${2:-16777216}
rate=${3:-1gbit}
lib=$(realpath "$build/plugin/libnccl-net-sieve.so")
rank=$(realpath "$build/tools/gpu/sieve-proxy-rank")
kbench=$(realpath "$build/tools/gpu/sieve-proxy-kernel-bench")

echo "== gather/scatter vs device-to-device copy"
set +e
"$kbench"
rc=$?
set -e
[[ $rc -eq 77 ]] && exit 77
[[ $rc -ne 0 ]] && exit $rc

prefix=sievegpu
bash tools/share/netlab.sh --prefix $prefix up 2 --rate "$rate"
trap 'bash tools/share/netlab.sh --prefix '$prefix' down' EXIT

# bench TRANSPORT: 2 ranks, one per namespace
bench() {
  local transport=$1 id=/tmp/sieve-proxy-bench-$$-$1 pids=()
  rm -f "$id"
  for r in 0 1; do
    local envs=(NCCL_HOSTID=sieve-bench-$r NCCL_SOCKET_IFNAME=eth0 SIEVE_SOCKET_IFNAME=eth0 NCCL_NET=$transport
                NCCL_MNNVL_ENABLE=0 NCCL_DEBUG=WARN)
    [[ $transport == Sieve ]] && envs+=(NCCL_NET_PLUGIN="$lib")
    bash tools/share/netlab.sh --prefix $prefix exec $r env "${envs[@]}" timeout 900 \
      "$rank" --rank $r --nranks 2 --id-file "$id" --library "$lib" bench --count "$count" --iters 5 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  rm -f "$id"
}
echo "== all-reduce over $rate through the Sieve net plugin (dense_ms = Sieve dense)"
bench Sieve
echo "== all-reduce over $rate through NCCL's socket transport (dense_ms = NCCL Socket dense)"
bench Socket
