#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh of a GPU kit on this machine, which has no GPU, in each way a GPU machine can lack one, with
# a fake driver that makes every step run and fail, and with a fake NCCL that fails or hangs:
#
#   run_without_gpu.sh SCENARIO KIT FAKE_DRIVER_DIR FAKE_NCCL_DIR
#   no-driver      no nvidia-smi, no libcuda: the machine section, "no GPU: ..." naming both, exit 77,
#                  nothing run (only summary.json in the results)
#   smi-no-driver  an nvidia-smi that lists an H100 but no libcuda: "no GPU: nvidia-smi lists ..., but
#                  the driver library libcuda.so.1 cannot be loaded", exit 77
#   smi-fails      an nvidia-smi that cannot reach the driver: "no GPU: nvidia-smi failed (exit 9: ...)"
#   old-driver     a driver of CUDA 12.8: "driver too old", exit 1, nothing run
#   all-steps      a fake driver with one GPU (--no-canary): every step runs, fails on its own (the
#                  CUDA runtime rejects the fake), and the next still runs; exit 1; the results are
#                  summary.json, summary.md and logs.tar.gz, holding every step's log and result
#   budget         the same with --budget 95, steps 4-6: step 5 (120 s at least) is skipped, saying why
#   canary-socket-fails  NCCL fails through Socket: the canary says NCCL's warning, steps 3-6 skipped with it
#   canary-sieve-fails   NCCL fails through Sieve alone: step 3 skipped, step 4 runs its Socket runs only
#   canary-hang    NCCL hangs: the canary's ranks get SIGUSR1 (their dump is in the log), then are killed
#                  at the canary's cap; step 4 skipped; nothing left running
#   no-nccl        a libnccl.so.2 that cannot be loaded: the NCCL steps skipped saying so, step 2 runs
#   quick          --quick --limit 600, steps "5,4,1": run in that order, budget from the limit, the
#                  quick profile's shorter runs (60 DDP steps, all-reduce to 256 MiB)
#   sanitizer-refused  a compute-sanitizer that says "Device not supported": step 7 partial, not failed
#   cut-short      run.sh killed during step 4 (as a device call at its limit): summary, tables and
#                  logs of step 1 are already in the results, step 4's result file already written;
#                  step 4's ranks survive, and the next run ends them before anything else
#   python-fallback  python3 has no torch: run.sh takes the fallback python that has
#   not-executable   the kit's programs lost their x bits in transit: run.sh restores them
# Each scenario runs a copy of the kit (what one run leaves cannot touch another's).
# Exit 77 (skipped) where this machine has a real nvidia-smi or libcuda.so.1: the scenarios need
# their absence.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $# -eq 4 ]] || fail "usage: run_without_gpu.sh SCENARIO KIT FAKE_DRIVER_DIR FAKE_NCCL_DIR"
scenario=$1 built_kit=$(realpath "$2") fake_driver=$(realpath "$3") fake_nccl=$(realpath "$4")
if command -v nvidia-smi >/dev/null || [[ $(ldconfig -p) == *"libcuda.so.1 "* ]]; then
  echo "SKIP: this machine has an NVIDIA driver; the scenarios need a machine without one"
  exit 77
fi
[[ -f $fake_driver/libcuda.so.1 ]] || fail "no libcuda.so.1 in $fake_driver"
[[ -f $fake_nccl/libnccl.so.2 ]] || fail "no libnccl.so.2 in $fake_nccl"

tmp=$(mktemp -d)
kit_processes() {  # pids of processes started by this scenario's kit (run.sh marks them)
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "SIEVE_GPU_KIT_DIR=$kit" && echo "${p#/proc/}"
  done
  return 0
}
cleanup() {
  local pids
  pids=$(kit_processes)
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/bin" "$tmp/out" "$tmp/work"
cp -a "$built_kit" "$tmp/kit"
kit=$(realpath "$tmp/kit")
export TMPDIR=$tmp/work  # run.sh's work directory, to look into after a run cut short
fake_smi() {  # fake_smi EXIT_STATUS OUTPUT: an nvidia-smi on PATH that prints OUTPUT
  printf '#!/bin/sh\necho "%s"\nexit %d\n' "$2" "$1" >"$tmp/bin/nvidia-smi"
  chmod +x "$tmp/bin/nvidia-smi"
}
# run.sh ARGS... with the fake tools first on PATH; sets $output and $status.
run_kit() {
  set +e
  output=$(cd "$tmp" && env PATH="$tmp/bin:$PATH" timeout 600 bash "$kit/run.sh" --out "$tmp/out" "$@" 2>&1)
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
summary() { "${PYTHON:-python3}" -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$tmp/out/summary.json" "$1"; }
step_field() {  # step_field N FIELD: that field of step N's result in summary.json
  summary "[t.get('$2') for t in s['steps'] if t['step'] == $1][0]"
}
in_logs() {  # in_logs MEMBER TEXT: the member of logs.tar.gz holds TEXT
  tar -xzOf "$tmp/out/logs.tar.gz" "$1" 2>/dev/null | grep -qF -- "$2" || fail "logs.tar.gz: $1 does not hold: $2"
}
with_fakes() {  # a fake GPU and nvidia-smi, and the fake NCCL doing $1
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 00000000:00:05.0"
  export LD_LIBRARY_PATH=$fake_driver KIT_NCCL_DIR=$fake_nccl FAKE_NCCL=$1
}

case $scenario in
no-driver)
  run_kit
  expect_status 77
  expect "no GPU: nvidia-smi not found, and the driver library libcuda.so.1 cannot be loaded"
  expect_nothing_ran
  [[ $(summary 's["status"]') == "no GPU" ]] || fail "summary.json does not say no GPU"
  tables=$("${PYTHON:-python3}" "$kit/kit/summary_tables.py" "$tmp/out/summary.json")
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
  run_kit --no-canary
  expect_status 1
  expect "GPU ready"
  for step in 1 2 3 4 5 6 7; do expect "== step $step "; done
  [[ $(summary '[s["step"] for s in s["steps"]]') == "[1, 2, 3, 4, 5, 6, 7]" ]] || fail "summary.json lacks a step"
  [[ $(summary 'sorted({t["status"] for t in s["steps"]} - {"fail", "partial"})') == "[]" ]] ||
    fail "a step did not fail: $(summary '[(t["step"], t["status"]) for t in s["steps"]]')"
  [[ $(ls "$tmp/out" | tr '\n' ' ') == "logs.tar.gz summary.json summary.md " ]] || fail "results: $(ls "$tmp/out")"
  listing=$(tar -tzf "$tmp/out/logs.tar.gz")
  for name in step1-kernels step2-bandwidth step3-multiprocess step4-allreduce step5-ddp step6-fsdp step7-sanitizers; do
    grep -qx "logs/$name.log" <<<"$listing" || fail "logs.tar.gz has no $name.log"
    grep -qx "logs/$name/result.json" <<<"$listing" || fail "step $name wrote no result.json of its own"
  done
  grep -q "^## Measured on a GPU" "$tmp/out/summary.md" || fail "summary.md has no tables"
  ;;
budget)
  fake_smi 0 "0, NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 00000000:00:05.0"
  export LD_LIBRARY_PATH=$fake_driver
  run_kit --no-canary --budget 95 4-6
  expect_status 1
  [[ $(summary '[t["step"] for t in s["steps"]]') == "[4, 5, 6]" ]] || fail "summary.json does not list steps 4-6"
  [[ $(summary '[t["status"] for t in s["steps"] if t["step"] == 5][0]') == skipped ]] || fail "step 5 was not skipped"
  reason=$(summary '[t["reason"] for t in s["steps"] if t["step"] == 5][0]')
  [[ $reason == *"needs at least 120 s"* ]] || fail "step 5's reason does not say what it needs: $reason"
  ;;
canary-socket-fails)
  with_fakes fail
  run_kit 3-6
  expect_status 1
  [[ $(summary 's["order"]') == "[0, 3, 4, 5, 6]" ]] || fail "the canary did not run first: $(summary 's["order"]')"
  for step in 3 4 5 6; do
    [[ $(step_field $step status) == skipped ]] || fail "step $step was not skipped"
    reason=$(step_field $step reason)
    [[ $reason == *"through NCCL's Socket transport: NCCL WARN Fake NCCL: connect to rank 1 failed"* ]] ||
      fail "step $step's reason is not NCCL's first warning: $reason"
  done
  [[ $(summary 's["steps"][0]["data"]["verdict"]') == none ]] || fail "the canary's verdict is not 'none'"
  ! grep -q "Sieve: 2 ranks" <<<"$(tar -xzOf "$tmp/out/logs.tar.gz" logs/step0-canary.log)" ||
    fail "the Sieve half ran after Socket failed"
  in_logs logs/step0-canary/canary-socket-0.log "NCCL INFO NCCL_DEBUG_SUBSYS set by environment to INIT,NET,ENV"
  ;;
canary-sieve-fails)
  with_fakes sieve-fails
  run_kit 3,4
  expect_status 1
  [[ $(summary 's["steps"][0]["data"]["verdict"]') == socket-only ]] || fail "the canary's verdict is not 'socket-only'"
  [[ $(step_field 3 status) == skipped ]] || fail "step 3 (Sieve alone) was not skipped"
  [[ $(step_field 3 reason) == *"NCCL WARN Fake NCCL"*"NCCL_NET=Sieve"* ]] || fail "step 3's reason: $(step_field 3 reason)"
  expect "the Socket half only"
  transports=$(summary '[c["name"].split(":")[0] for t in s["steps"] if t["step"] == 4 for c in t["checks"]]')
  [[ $transports == *"Socket, 2 ranks"* && $transports == *"Socket, 4 ranks"* && $transports != *Sieve* ]] ||
    fail "step 4 did not run its Socket runs alone: $transports"
  [[ $(step_field 4 status) == partial ]] || fail "step 4 is not partial: $(step_field 4 status): $(step_field 4 reason)"
  ;;
canary-hang)
  with_fakes hang
  run_kit 4
  expect_status 1
  [[ $(step_field 0 status) == fail ]] || fail "the canary did not fail: $(step_field 0 status)"
  [[ $(step_field 4 reason) == *"through NCCL's Socket transport: no answer within"* ]] ||
    fail "step 4's reason: $(step_field 4 reason)"
  in_logs logs/step0-canary/canary-socket-0.log "fake NCCL: state dump on SIGUSR1"
  in_logs logs/step0-canary/canary-socket-1.log "fake NCCL: state dump on SIGUSR1"
  [[ $(summary 's["steps"][0]["seconds"] <= 45') == True ]] || fail "the canary ran past its 45 s"
  [[ -z $(kit_processes) ]] || fail "processes left running: $(kit_processes)"
  ;;
no-nccl)
  with_fakes ok
  mkdir "$tmp/broken-nccl"
  : >"$tmp/broken-nccl/libnccl.so.2"  # there, but not a library
  export KIT_NCCL_DIR=$tmp/broken-nccl
  run_kit 2,3-6
  expect_status 1
  expect "NCCL:    not found:"
  [[ $(summary 's["order"]') == "[2, 0, 3, 4, 5, 6]" ]] || fail "order: $(summary 's["order"]')"
  for step in 0 3 4 5 6; do
    [[ $(step_field $step status) == skipped && $(step_field $step reason) == "no NCCL: "*"libnccl.so.2"* ]] ||
      fail "step $step: $(step_field $step status): $(step_field $step reason)"
  done
  [[ $(step_field 2 status) == fail ]] || fail "step 2 did not run"
  ;;
quick)
  with_fakes ok
  run_kit --quick --limit 600 --no-canary 5,4,1
  expect_status 1
  [[ $(summary '[t["step"] for t in s["steps"]]') == "[5, 4, 1]" ]] || fail "not in the order given"
  [[ $(summary 's["profile"]') == quick ]] || fail "not the quick profile"
  budget=$(summary 's["budget_s"]')
  ((budget > 500 && budget <= 560)) || fail "the budget ($budget s) is not the limit's 600 s less 40"
  [[ $(step_field 5 budget_s) == 140 && $(step_field 4 budget_s) == 90 ]] || fail "not the quick budgets"
  in_logs logs/step5-ddp/dense-0.log "--steps 60"
  in_logs logs/step4-allreduce/sieve-2-0.log "--max-bytes 256M"
  ;;
sanitizer-refused)
  with_fakes ok
  printf '#!/bin/sh\necho "========= COMPUTE-SANITIZER"\necho "========= Error: Device not supported. The sanitizer cannot run on this device."\necho "========= Error: unknown error (999)"\nexit 255\n' >"$tmp/bin/compute-sanitizer"
  chmod +x "$tmp/bin/compute-sanitizer"
  run_kit 7
  expect "compute-sanitizer: $tmp/bin/compute-sanitizer"
  [[ $(step_field 7 status) == partial ]] || fail "step 7 is $(step_field 7 status), not partial: $(step_field 7 reason)"
  [[ $(step_field 7 reason) == *"memcheck: compute-sanitizer cannot run here: Device not supported"*"racecheck:"* ]] ||
    fail "step 7's reason: $(step_field 7 reason)"
  ;;
cut-short)
  with_fakes hang
  (cd "$tmp" && PATH="$tmp/bin:$PATH" exec setsid bash "$kit/run.sh" --out "$tmp/out" --no-canary 1,4 >"$tmp/run.log" 2>&1) &
  runner=$!
  end=$((SECONDS + 120))
  ranks=""
  until [[ -n $ranks ]] && tar -tzf "$tmp/out/logs.tar.gz" 2>/dev/null | grep -qx logs/step1-kernels.log; do
    ((SECONDS < end)) || { cat "$tmp/run.log"; fail "step 4's ranks never started"; }
    sleep 0.5
    ranks=$(for p in $(kit_processes); do
              if grep -qa sieve-allreduce-perf "/proc/$p/cmdline" 2>/dev/null; then echo "$p"; fi
            done)
  done
  kill -KILL -- -"$runner"  # run.sh and its scheduler, as a device call's limit would; not the steps' sessions
  wait "$runner" 2>/dev/null || true
  cat "$tmp/run.log"
  [[ $(summary '[(t["step"], t["status"]) for t in s["steps"]]') == "[(1, 'fail')]" ]] ||
    fail "the results in OUT lack step 1: $(summary 's["steps"]')"
  grep -q "^## Measured on a GPU" "$tmp/out/summary.md" || fail "summary.md not written after step 1"
  in_logs logs/step1-kernels/result.json '"status": "fail"'
  running=$(find "$tmp/work" -path '*step4-allreduce/result.json')
  [[ -n $running ]] && grep -q '"status": "running"' "$running" || fail "step 4 had not written its result as it went"
  for p in $ranks; do [[ -e /proc/$p ]] || fail "rank $p of step 4 did not outlive run.sh (the test is void)"; done
  unset LD_LIBRARY_PATH  # the next run: no GPU at all, so it ends at the machine section
  rm "$tmp/bin/nvidia-smi"
  run_kit
  expect_status 77
  expect "ending a process left by an earlier run of this kit"
  sleep 1
  for p in $ranks; do
    [[ ! -e /proc/$p ]] || [[ $(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null) == Z ]] ||
      fail "rank $p of the earlier run still runs"
  done
  ;;
python-fallback)
  real=$(command -v python3)
  printf '#!/bin/sh\nexec %s -S "$@"\n' "$real" >"$tmp/bin/python3"  # no site-packages: no torch
  mkdir -p "$tmp/torch-python/site/torch"
  echo '__version__ = "0.0+kit-test"' >"$tmp/torch-python/site/torch/__init__.py"
  printf '#!/bin/sh\nPYTHONPATH=%s exec %s -S "$@"\n' "$tmp/torch-python/site" "$real" >"$tmp/torch-python/python3"
  chmod +x "$tmp/bin/python3" "$tmp/torch-python/python3"
  export KIT_FALLBACK_PYTHON=$tmp/torch-python/python3
  run_kit
  expect_status 77
  expect "run.sh: $tmp/bin/python3 has no PyTorch: using $tmp/torch-python/python3"
  expect "PyTorch: 0.0+kit-test"
  ;;
not-executable)
  chmod a-x "$kit"/bin/* "$kit/run.sh"
  run_kit
  expect_status 77
  expect "no GPU: nvidia-smi not found"
  for program in "$kit"/bin/*; do [[ -x $program ]] || fail "$program is still not executable"; done
  ;;
*) fail "unknown scenario $scenario";;
esac
echo "PASS: $scenario"
