#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sieve-bench as the first process of a PID namespace, as in `docker run IMAGE sieve-bench ...` or a
# Kubernetes Job: its nodes' parent is then PID 1, which must not read as "the orchestrator died".
# Needs root (a PID namespace); skipped (77) without.
#
#   pid_one_test.sh SIEVE_BENCH
set -uo pipefail
bench=$1
unshare --pid --fork --mount-proc true 2>/dev/null || { echo "needs root for a PID namespace: skipped"; exit 77; }
pid=$(unshare --pid --fork --mount-proc sh -c 'echo $$')
[[ $pid == 1 ]] || { echo "FAIL: the namespace's first process is pid $pid, not 1"; exit 1; }
out=$(unshare --pid --fork --mount-proc "$bench" --loopback --rate none --model resnet18 --modes dense \
        --iters 1 --warmup 0 --quiet --timeout 60 2>&1)
rc=$?
if [[ $rc -ne 0 || $out != *"all correct"* ]]; then
  echo "FAIL: sieve-bench as PID 1 exited $rc:"
  echo "$out"
  exit 1
fi
echo "sieve-bench runs as a PID namespace's first process"
