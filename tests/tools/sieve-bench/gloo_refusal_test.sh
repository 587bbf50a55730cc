#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `sieve-bench --gloo` refuses at once, with the reason, when this machine's PyTorch cannot run the
# comparison: no PyTorch at all, or a Gloo that cannot sum the dtype (Debian 12's torch 1.13 cannot
# sum bf16). Nothing is built first: no namespace lab, no node. Stand-in `torch` packages on
# PYTHONPATH play both machines, whatever PyTorch this one has. Needs root (--gloo runs in the lab).
#
#   gloo_refusal_test.sh SIEVE_BENCH PYTHON
set -uo pipefail
bench=$1
python=$2
[[ $(id -u) -eq 0 && -x $python ]] || { echo "skipped: needs root and $python"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/none/torch" "$work/old/torch"
echo 'raise ImportError("No module named torch")' >"$work/none/torch/__init__.py"
cat >"$work/old/torch/__init__.py" <<'PY'
# A PyTorch whose Gloo sums float32 only, as Debian 12's torch 1.13 does.
import types
__version__ = "1.13-standin"
float32, bfloat16 = "float32", "bfloat16"
class _Tensor:
    def __init__(self, dtype):
        self.dtype = dtype
def ones(n, dtype=float32):
    return _Tensor(dtype)
def _all_reduce(tensor, *args, **kwargs):
    if tensor.dtype != float32:
        raise RuntimeError("Invalid scalar type")
distributed = types.SimpleNamespace(is_gloo_available=lambda: True, init_process_group=lambda *a, **k: None,
                                    destroy_process_group=lambda: None, all_reduce=_all_reduce)
PY
echo 'from torch import distributed as _d; import sys; sys.modules[__name__].__dict__.update(vars(_d))' \
  >"$work/old/torch/distributed.py"

labs_before=$(ip netns list 2>/dev/null | grep -c '^sb')
out=$(PYTHONPATH="$work/none" "$bench" --gloo --python "$python" --model resnet18 --quiet 2>&1); status=$?
[[ $status -eq 2 && $out == *"--gloo: $python cannot import PyTorch (No module named torch); pass sieve-bench --python a Python that has it"* ]] ||
  fail "without PyTorch: exit $status: $out"
out=$(PYTHONPATH="$work/old" "$bench" --gloo --python "$python" --rate 10gbit --dtype bf16 --model resnet18 --quiet 2>&1); status=$?
[[ $status -eq 2 && $out == *"--gloo: Gloo in torch 1.13-standin cannot sum bf16: Invalid scalar type"* ]] ||
  fail "bf16 with a Gloo that cannot sum it: exit $status: $out"
[[ $out == *netlab* ]] && fail "a lab was built before the refusal: $out"
[[ $(ip netns list 2>/dev/null | grep -c '^sb') -eq $labs_before ]] || fail "namespaces were left behind"
[[ $failures -eq 0 ]] && echo "--gloo refuses what this PyTorch cannot run, first, with the reason"
exit $((failures > 0))
