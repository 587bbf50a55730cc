#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every GPU check of Sieve from a kit made by tools/gpu/bundle.sh, in one command:
#
#   bash DIR/run.sh [--quick] [--limit SECONDS | --budget SECONDS] [--no-canary] [--installed] [--out RESULTS] [STEPS]
#
# STEPS: "1-7" (the default), "4,1,5" (run in the order given). Each step has its own time budget
# (full profile / --quick):
#   0 NCCL canary: 2 ranks, 1 MiB, NCCL's Socket transport then Sieve      45 s /  45 s
#   1 the proxy's kernel tests                                             120 s /  40 s
#   2 gather/scatter bandwidth vs a device-to-device copy                   120 s /  40 s
#   3 the proxy's multi-process tests under real NCCL (2 ranks on one GPU)  240 s /  70 s
#   4 NCCL all-reduce through the Sieve net plugin vs NCCL_NET=Socket       300 s /  90 s (to 256 MiB)
#   5 DDP ResNet-18 pruned 80 %: dense vs published vs learned masks        360 s / 140 s (60 steps)
#   6 FSDP fully_shard, 2 ranks: dense vs Sieve                             180 s /  70 s (30 steps)
#   7 the kernel tests under compute-sanitizer memcheck and racecheck       240 s / 120 s
# The canary runs by itself before the first NCCL step (3-6): when NCCL's Socket transport fails it,
# every NCCL step is skipped with NCCL's first warning as the reason; when only Sieve fails it, the
# NCCL steps run their Socket halves only. --no-canary runs them regardless.
# --quick fits every table in one 9-minute call. --limit: the call's time limit (the device tool's
# timeout_s); the steps get it less 40 s, for the last step's kill and the packing. --budget: the
# steps' total (default 1620 s, 27 minutes). A step whose minimum no longer fits is skipped, and a
# failing step does not stop the next; a step out of time gets SIGUSR1 (the proxy's state dump), 2 s,
# then the kill. After every step the results are packed into RESULTS (default $OUT when set, else
# ./sieve-gpu-results): summary.json, summary.md (the README's "Measured on a GPU" tables) and
# logs.tar.gz, so a run cut short still returns what it did.
#
# First it ends what an earlier run of this kit left running, makes the kit's programs executable,
# chooses the python (KIT_PYTHON, else python3 when it has PyTorch, else KIT_FALLBACK_PYTHON, default
# /opt/torch/.venv/bin/python3), finds NCCL (KIT_NCCL_DIR, else the nvidia-nccl-cu13 wheel of that
# python, else the system's), puts it and the kit's lib/ on LD_LIBRARY_PATH, and prints the machine.
# --installed tests what an operator ships instead of the kit's own copies: the NCCL steps (default
# 4-6) load the library of the python's installed package `sieve` (the wheel, or the .deb's) and
# import that package; it must pass its doctor (`python -m sieve --require proxy`) first.
# Exit status: 0 = every step passed; 1 = a step failed, the GPU is unusable or --installed found no
# usable installed Sieve; 77 = no GPU (nothing else ran); 2 = bad arguments.
set -euo pipefail

die() { echo "run.sh: $*" >&2; exit 2; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }  # also from the source tree, before a kit exists

kit=$(cd "$(dirname "$0")" && pwd -P)
[[ -f $kit/bin/sieve-gpu-probe && -d $kit/kit ]] ||
  die "$kit is not a GPU kit: make one with tools/gpu/bundle.sh DIR, then run DIR/run.sh"

started=$(date +%s)
out=${OUT:-$PWD/sieve-gpu-results}
budget="" limit="" profile=full canary=() installed=""
steps=""
while (($#)); do
  case $1 in
    --out) [[ $# -ge 2 ]] || die "--out needs a directory"; out=$2; shift 2;;
    --budget) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--budget needs a number of seconds"; budget=$2; shift 2;;
    --limit) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--limit needs a number of seconds (the call's timeout_s)"; limit=$2; shift 2;;
    --quick) profile=quick; shift;;
    --no-canary) canary=(--no-canary); shift;;
    --installed) installed=1; shift;;
    -h|--help) usage; exit 0;;
    -*) die "unknown option $1 (see --help)";;
    *) steps=$1; shift;;
  esac
done
[[ -n $steps ]] || { [[ -n $installed ]] && steps=4-6 || steps=1-7; }  # installed: the steps that load it
[[ $steps =~ ^[0-7](-[0-7])?(,[0-7](-[0-7])?)*$ ]] || die "bad step list '$steps' (steps 0-7: '1-7', '4,1,5', '3')"
[[ -z $budget || -z $limit ]] || die "--budget and --limit both given: --limit sets the budget (the limit less 40 s)"
if [[ -n $limit ]]; then
  ((limit > 60)) || die "--limit $limit leaves no time for any step (give the call's timeout_s, e.g. 600)"
  budget=$((limit - 20))  # the deadline below is 20 s earlier still
fi
budget=${budget:-1620}

# The kit may have travelled without its modes (a copy, an archive): its programs must be executable.
chmod u+x "$kit"/bin/* "$kit/run.sh" 2>/dev/null || true
for program in "$kit"/bin/*; do
  [[ -x $program ]] || die "$program is not executable and cannot be made so (a read-only copy?)"
done

# The python: the one with PyTorch (the training steps need it; the others need python3 alone).
has_torch() { timeout 120 "$1" -c 'import torch' >/dev/null 2>&1; }
if [[ -n ${KIT_PYTHON:-} ]]; then
  python=$KIT_PYTHON
  command -v "$python" >/dev/null || die "KIT_PYTHON=$python not found"
else
  python=python3
  fallback=${KIT_FALLBACK_PYTHON:-/opt/torch/.venv/bin/python3}
  if ! command -v python3 >/dev/null; then
    [[ -x $fallback ]] || die "no python3 on PATH nor $fallback: the kit needs python3 (set KIT_PYTHON)"
    python=$fallback
    echo "run.sh: no python3 on PATH: using $fallback"
  elif ! has_torch python3; then
    if [[ -x $fallback ]] && has_torch "$fallback"; then
      echo "run.sh: $(command -v python3) has no PyTorch: using $fallback"
      python=$fallback
    else
      echo "run.sh: $(command -v python3) has no PyTorch, nor has $fallback: the training steps will fail (set KIT_PYTHON)"
    fi
  fi
fi
python=$(command -v "$python")
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/sieve-gpu-kit.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Every process of this run carries the kit's path and the run's id: what an earlier run left (a call
# cut short ends run.sh, not the steps' own sessions) is found by them and ended before anything starts.
export SIEVE_GPU_KIT_DIR=$kit SIEVE_GPU_KIT_RUN="$$-$started"
"$python" "$kit/kit/stale.py" "$kit" "$SIEVE_GPU_KIT_RUN" || true

# NCCL: the one PyTorch uses on this machine, so the kit measures what training jobs run with.
nccl_dir="" nccl_found_by=""
if [[ -n ${KIT_NCCL_DIR:-} ]]; then
  [[ -e $KIT_NCCL_DIR/libnccl.so.2 ]] || die "KIT_NCCL_DIR=$KIT_NCCL_DIR has no libnccl.so.2"
  nccl_dir=$KIT_NCCL_DIR nccl_found_by="KIT_NCCL_DIR"
else
  wheel=$(timeout 120 "$python" - 2>/dev/null <<'PY' || true
import glob, os, site, sys
roots = []
try:
    import nvidia.nccl
    roots += [os.path.join(p, "lib") for p in nvidia.nccl.__path__]
except Exception:
    pass
for base in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    roots += glob.glob(os.path.join(base, "nvidia", "*", "lib"))
print(next((r for r in roots if os.path.exists(os.path.join(r, "libnccl.so.2"))), ""))
PY
)
  if [[ -n $wheel ]]; then
    nccl_dir=$wheel nccl_found_by="the nvidia-nccl wheel of $python"
  else
    system=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" && !found { print $NF; found = 1 }' || true)
    if [[ -n $system ]]; then nccl_dir=$(dirname "$system") nccl_found_by="the system (ldconfig)"; fi
  fi
fi
export LD_LIBRARY_PATH="$kit/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ -n $installed ]]; then
  found=$("$python" "$kit/kit/installed.py" "$python") || { echo "run.sh: --installed: $found" >&2; exit 1; }
  export KIT_INSTALLED_LIBRARY=${found%%$'\n'*} KIT_INSTALLED_PACKAGE=${found#*$'\n'}
  echo "run.sh: --installed: the NCCL steps load $KIT_INSTALLED_LIBRARY and import $KIT_INSTALLED_PACKAGE"
fi
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the kit

set +e
"$python" "$kit/kit/machine.py" --kit "$kit" --nccl-dir "$nccl_dir" --nccl-found-by "$nccl_found_by" \
  --json "$work/machine.json" 2>&1 | tee "$work/machine.log"
machine=${PIPESTATUS[0]}
set -e
if ((machine != 0)); then
  # No GPU, or one the kit cannot use: the machine section is the whole result.
  "$python" - "$work/machine.json" "$out/summary.json" "$steps" <<'PY'
import json, sys
machine = json.load(open(sys.argv[1]))
summary = {"kit": machine.pop("kit", {}), "machine": machine, "steps_selected": sys.argv[3], "steps": [],
           "status": "no GPU" if machine["verdict"]["exit"] == 77 else "fail"}
json.dump(summary, open(sys.argv[2], "w"), indent=1)
PY
  exit "$machine"
fi

# The steps get the budget less what packing the results takes.
set +e
"$python" "$kit/kit/schedule.py" --kit "$kit" --work "$work" --steps "$steps" --profile "$profile" "${canary[@]}" \
  --deadline $((started + budget - 20)) --machine "$work/machine.json" --summary "$work/summary.json" --out "$out"
status=$?
set -e
((status == 0 || status == 1)) || { [[ -f $work/summary.json ]] || exit 2; status=1; }
"$python" "$kit/kit/pack.py" --work "$work" --summary "$work/summary.json" --out "$out" || status=1
exit "$status"
