#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo: 4 emulated nodes all-reduce a pruned ResNet-50's gradients through the Sieve plugin,
# dense and compacted back to back, on a 1 Gbit/s virtual switch (as root: network namespaces
# shaped by tc; otherwise loopback), with PyTorch's Gloo on the same link for comparison when it
# can. Installs what it needs, builds, runs, and ends with one line saying what happened.
# Extra arguments go to sieve-bench (e.g. --model vit_b_16 --density 0.1 --rate 10gbit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
python=${PYTHON_VENV:-/opt/sieve/venv}/bin/python  # PyTorch 2.11, from tools/install-deps.sh

bash "$root/tools/install-deps.sh" --without-newest  # the demo runs on PyTorch 2.11 alone
echo "demo: building (this takes a few minutes the first time)..."
bash "$root/tools/build.sh" >/dev/null

# Gloo runs in the namespace lab only: offer it where PyTorch has Gloo and a lab can be built (root
# in a container without CAP_NET_ADMIN cannot; sieve-bench then says why and runs on loopback).
gloo_possible() {
  [[ $(id -u) -eq 0 ]] || return 1
  "$python" -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null || return 1
  local probe=sdemo$$ status=0
  bash "$root/tools/share/netlab.sh" --prefix "$probe" up 2 >/dev/null 2>&1 || status=$?
  bash "$root/tools/share/netlab.sh" --prefix "$probe" down >/dev/null 2>&1
  return "$status"
}

# --prune unstructured --density 0.2 are the defaults, left unsaid so that --masks FILE can replace them.
args=(--nodes 4 --model resnet50 --rate 1gbit --steps 3 --warmup 1)
# The emulated nodes are one job: give them its token, as a real job has (no "no SIEVE_JOB_TOKEN" warnings).
SIEVE_JOB_TOKEN=${SIEVE_JOB_TOKEN:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}
export SIEVE_JOB_TOKEN
if gloo_possible; then
  args+=(--gloo --python "$python")
elif [[ $(id -u) -eq 0 ]]; then
  echo "demo: no PyTorch Gloo comparison here (it needs PyTorch's Gloo and a network namespace lab)"
fi
echo "demo: 4 nodes, ResNet-50 with 80 % of its weights pruned, ring all-reduce through Sieve at 1 Gbit/s"
exec "$build/tools/sieve-bench/sieve-bench" "${args[@]}" "$@"
