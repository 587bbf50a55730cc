#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tools/demo.sh as a new user sees it: its own sieve-bench flags draw no deprecation note, and the
# token it gives its emulated nodes is one Sieve accepts. The demo's lines are taken from the script
# itself (it installs and builds when run, so it is not run here); sieve-bench then runs them on
# loopback with a small model, later flags overriding the demo's model and link.
#   demo_test.sh tools/demo.sh SIEVE_BENCH SIEVE_INFO
set -uo pipefail
demo=$1 bench=$2 info=$3
args_line=$(grep -E '^args=\(' "$demo") || { echo "FAIL: no args=(...) line in $demo"; exit 1; }
token_line=$(grep -E '^SIEVE_JOB_TOKEN=' "$demo") || { echo "FAIL: the demo sets no SIEVE_JOB_TOKEN"; exit 1; }
eval "$args_line"
unset SIEVE_JOB_TOKEN
eval "$token_line"
export SIEVE_JOB_TOKEN
# The plugin checks a token when it starts: sieve-info starts it as NCCL would.
said=$("$info" 2>&1 >/dev/null)
if grep -q "SIEVE_JOB_TOKEN" <<<"$said"; then
  echo "FAIL: the plugin refuses the demo's token: $said"
  exit 1
fi
err=$("$bench" "${args[@]}" --loopback --model resnet18 --rate none --steps 1 --warmup 0 --quiet --timeout 60 \
       2>&1 >/dev/null)
status=$?
[[ $status -eq 0 ]] || { echo "FAIL: sieve-bench with the demo's flags: exit $status: $err"; exit 1; }
if grep -qi "deprecated" <<<"$err"; then
  echo "FAIL: the demo's own flags draw a deprecation note: $err"
  exit 1
fi
echo "the demo's flags run without a deprecation note, and its job token is accepted"
