#!/usr/bin/env bash
# run.sh of a GPU kit on this machine, which has no GPU, in each way a GPU machine can lack one, and
# with a fake driver that makes every step run and fail:
#
#   run_without_gpu.sh SCENARIO KIT FAKE_DRIVER_DIR
#   no-driver      no nvidia-smi, no libcuda: the machine section, "no GPU: ..." naming both, exit 77,
#                  nothing run (only summary.json in the results)
#   smi-no-driver  an nvidia-smi that lists an H100 but no libcuda: "no GPU: nvidia-smi lists ..., but
#                  the driver library libcuda.so.1 cannot be loaded", exit 77
#   smi-fails      an nvidia-smi that cannot reach the driver: "no GPU: nvidia-smi failed (exit 9: ...)"
#   old-driver     a driver of CUDA 12.8: "driver too old", exit 1, nothing run
#   all-steps      a fake driver with one GPU: every step runs, fails on its own (the CUDA runtime
#                  rejects the fake), and the next still runs; exit 1; the results are summary.json,
#                  summary.md and logs.tar.gz, holding every step's log and result
#   budget         the same with --budget 95, steps 4-6: step 5 (120 s at least) is skipped, saying why
# Exit 77 (skipped) where this machine has a real nvidia-smi or libcuda.so.1: the scenarios need
# their absence.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || fail "usage: run_without_gpu.sh SCENARIO KIT FAKE_DRIVER_DIR"
scenario=$1 kit=$(realpath "$2") fake_driver=$(realpath "$3")
if command -v nvidia-smi >/dev/null || [[ $(ldconfig -p) == *"libcuda.so.1 "* ]]; then
  echo "SKIP: this machine has an NVIDIA driver; the scenarios need a machine without one"
  exit 77
fi
[[ -f $fake_driver/libcuda.so.1 ]] || fail "no libcuda.so.1 in $fake_driver"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/out"
fake_smi() {  # fake_smi EXIT_STATUS OUTPUT: an nvidia-smi on PATH that prints OUTPUT
  printf '#!/bin/sh\necho "%s"\nexit %d\n' "$2" "$1" >"$tmp/bin/nvidia-smi"
  chmod +x "$tmp/bin/nvidia-smi"
}
# run.sh ARGS... with the fake tools first on PATH; sets $output and $status.
run_kit() {
  set +e
  output=$(cd "$tmp" && env PATH="$tmp/bin:$PATH" timeout 600 "$kit/run.sh" --out "$tmp/out" "$@" 2>&1)
  status=$?
  set -e
  echo "$output"
  echo "--- run.sh exit status: $status"
}
expect() { grep -qF -- "$1" <<<"$output" || fail "run.sh did not say: $1"; }
expect_status() { [[ $status -eq $1 ]] || fail "run.sh exited $status, expected $1"; }
expect_nothing_ran() {
  expect "== machine"
  expect "host:"
  expect "NCCL:"
  ! grep -q "^== step" <<<"$output" || fail "a step ran"
  [[ $(ls "$tmp/out") == summary.json ]] || fail "results other than summary.json: $(ls "$tmp/out")"
}
summary() { python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$tmp/out/summary.json" "$1"; }

case $scenario in
no-driver)
  run_kit
  expect_status 77
  expect "no GPU: nvidia-smi not found, and the driver library libcuda.so.1 cannot be loaded"
  expect_nothing_ran
  [[ $(summary 's["status"]') == "no GPU" ]] || fail "summary.json does not say no GPU"
  tables=$(python3 "$kit/kit/summary_tables.py" "$tmp/out/summary.json")
  grep -q "^No step ran: no GPU: nvidia-smi not found" <<<"$tables" || fail "summary_tables.py does not render a run without a GPU"
  ;;
smi-no-driver)
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 00000000:00:05.0"
  run_kit
  expect_status 77
  expect "GPU 0:   NVIDIA H100 80GB HBM3, driver 580.159.04"
  expect "no GPU: nvidia-smi lists NVIDIA H100 80GB HBM3, but the driver library libcuda.so.1 cannot be loaded"
  expect_nothing_ran
  ;;
smi-fails)
  fake_smi 9 "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
  run_kit
  expect_status 77
  expect "no GPU: nvidia-smi failed (exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
  expect_nothing_ran
  ;;
old-driver)
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 570.86.10, 81559 MiB, 00000000:00:05.0"
  export LD_LIBRARY_PATH=$fake_driver FAKE_CUDA_DRIVER_VERSION=12080
  run_kit
  expect_status 1
  expect "GPU unusable: driver too old: it supports CUDA 12.8, the kit's programs are built with CUDA 13.0"
  expect_nothing_ran
  ;;
all-steps)
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 00000000:00:05.0"
  export LD_LIBRARY_PATH=$fake_driver
  run_kit
  expect_status 1
  expect "GPU ready"
  for step in 1 2 3 4 5 6; do expect "== step $step "; done
  [[ $(summary '[s["step"] for s in s["steps"]]') == "[1, 2, 3, 4, 5, 6]" ]] || fail "summary.json lacks a step"
  [[ $(summary 'sorted({t["status"] for t in s["steps"]} - {"fail", "partial"})') == "[]" ]] ||
    fail "a step did not fail: $(summary '[(t["step"], t["status"]) for t in s["steps"]]')"
  [[ $(ls "$tmp/out" | tr '\n' ' ') == "logs.tar.gz summary.json summary.md " ]] || fail "results: $(ls "$tmp/out")"
  listing=$(tar -tzf "$tmp/out/logs.tar.gz")
  for name in step1-kernels step2-bandwidth step3-multiprocess step4-allreduce step5-ddp step6-fsdp; do
    grep -qx "logs/$name.log" <<<"$listing" || fail "logs.tar.gz has no $name.log"
    grep -qx "logs/$name/result.json" <<<"$listing" || fail "step $name wrote no result.json of its own"
  done
  grep -q "^## Measured on a GPU" "$tmp/out/summary.md" || fail "summary.md has no tables"
  ;;
budget)
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 00000000:00:05.0"
  export LD_LIBRARY_PATH=$fake_driver
  run_kit --budget 95 4-6
  expect_status 1
  [[ $(summary '[t["step"] for t in s["steps"]]') == "[4, 5, 6]" ]] || fail "summary.json does not list steps 4-6"
  [[ $(summary '[t["status"] for t in s["steps"] if t["step"] == 5][0]') == skipped ]] || fail "step 5 was not skipped"
  reason=$(summary '[t["reason"] for t in s["steps"] if t["step"] == 5][0]')
  [[ $reason == *"needs at least 120 s"* ]] || fail "step 5's reason does not say what it needs: $reason"
  ;;
*) fail "unknown scenario $scenario";;
esac
echo "PASS: $scenario"
