#!/usr/bin/env bash
# The demo: 4 emulated nodes all-reduce a pruned ResNet-50's gradients through the Sieve plugin,
# dense and compacted back to back, on a 1 Gbit/s virtual switch (as root: network namespaces
# shaped by tc; otherwise loopback), with PyTorch's Gloo on the same link for comparison when it
# can. Installs what it needs, builds, runs, and ends with one line saying what happened.
# Extra arguments go to sieve-bench (e.g. --model vit_b_16 --density 0.1 --rate 10gbit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

bash "$root/tools/install-deps.sh" python3-torch
echo "demo: building (this takes a few minutes the first time)..."
bash "$root/tools/build.sh" >/dev/null

# --prune unstructured --density 0.2 are the defaults, left unsaid so that --masks FILE can replace them.
args=(--nodes 4 --model resnet50 --rate 1gbit --iters 3 --warmup 1)
if [[ $(id -u) -eq 0 ]] && /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
  args+=(--gloo)
fi
echo "demo: 4 nodes, ResNet-50 with 80 % of its weights pruned, ring all-reduce through Sieve at 1 Gbit/s"
exec "$build/tools/bench/sieve-bench" "${args[@]}" "$@"
