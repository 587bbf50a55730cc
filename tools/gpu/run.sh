#!/usr/bin/env bash
# Runs every GPU check of Sieve from a kit made by tools/gpu/bundle.sh, in one command:
#
#   DIR/run.sh [--out RESULTS] [--budget SECONDS] [STEPS]
#
# STEPS: "1-6" (the default), "1,2,5", "4". The steps, each with its own time budget:
#   1 kernel tests, then compute-sanitizer memcheck and racecheck on them        300 s
#   2 gather/scatter bandwidth vs a device-to-device copy                        120 s
#   3 the proxy's multi-process tests under real NCCL (2 ranks on one GPU)       240 s
#   4 NCCL all-reduce through the Sieve net plugin vs NCCL_NET=Socket            300 s
#   5 DDP ResNet-18 pruned 80 %: dense vs published vs learned masks             360 s
#   6 FSDP fully_shard, 2 ranks: dense vs Sieve                                  180 s
# --budget (default 1500 s: 25 minutes) bounds the whole run; a step whose minimum no longer fits is
# skipped, and a failing step does not stop the next. Results go to RESULTS (default $OUT when set,
# else ./sieve-gpu-results): summary.json, summary.md (the README's "Measured on a GPU" tables) and
# logs.tar.gz.
#
# First it finds NCCL (KIT_NCCL_DIR, else the nvidia-nccl-cu13 wheel of python3's PyTorch, else the
# system's), puts it and the kit's lib/ on LD_LIBRARY_PATH, and prints the machine. Exit status:
# 0 = every step passed; 1 = a step failed or the GPU is unusable; 77 = no GPU (nothing else ran);
# 2 = bad arguments. KIT_PYTHON chooses the python (default python3: the one with PyTorch).
set -euo pipefail

die() { echo "run.sh: $*" >&2; exit 2; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }  # also from the source tree, before a kit exists

kit=$(cd "$(dirname "$0")" && pwd)
[[ -x $kit/bin/sieve-gpu-probe && -d $kit/kit ]] ||
  die "$kit is not a GPU kit: make one with tools/gpu/bundle.sh DIR, then run DIR/run.sh"

out=${OUT:-$PWD/sieve-gpu-results}
budget=1500
steps=1-6
while (($#)); do
  case $1 in
    --out) [[ $# -ge 2 ]] || die "--out needs a directory"; out=$2; shift 2;;
    --budget) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--budget needs a number of seconds"; budget=$2; shift 2;;
    -h|--help) usage; exit 0;;
    -*) die "unknown option $1 (see --help)";;
    *) steps=$1; shift;;
  esac
done
[[ $steps =~ ^[1-6](-[1-6])?(,[1-6](-[1-6])?)*$ ]] || die "bad step list '$steps' (steps 1-6: '1-6', '1,2,5', '3')"
python=${KIT_PYTHON:-python3}
command -v "$python" >/dev/null || die "$python not found: the kit needs python3 (set KIT_PYTHON)"
started=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/sieve-gpu-kit.XXXXXX")
trap 'rm -rf "$work"' EXIT

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
"$python" "$kit/kit/schedule.py" --kit "$kit" --work "$work" --steps "$steps" --deadline $((started + budget - 20)) \
  --machine "$work/machine.json" --summary "$work/summary.json" --out "$out"
status=$?
set -e
((status == 0 || status == 1)) || { [[ -f $work/summary.json ]] || exit 2; status=1; }
"$python" "$kit/kit/pack.py" --work "$work" --summary "$work/summary.json" --out "$out" || status=1
exit "$status"
