#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SIEVE_LOG_LEVEL governs Sieve's lines on the tools' stderr, as the README says: the plugin the
# tools load logs through their logger, which must honour it (it used to print warnings only).
#
#   log_level_test.sh SIEVE_BENCH SIEVE_INFO
set -uo pipefail
bench=$1 info=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
small=(--loopback --nodes 2 --model resnet18 --modes dense --steps 1 --warmup 0 --rate none --quiet --timeout 60)

err=$(SIEVE_LOG_LEVEL=info "$bench" "${small[@]}" 2>&1 >/dev/null)
grep -q '^INFO NET/Sieve initialised' <<<"$err" || fail "SIEVE_LOG_LEVEL=info: no INFO line from sieve-bench's nodes: $err"

err=$(SIEVE_NSOCK=2 "$bench" "${small[@]}" 2>&1 >/dev/null)
grep -q '^WARN NET/Sieve unknown variable SIEVE_NSOCK' <<<"$err" || fail "default level: the warning is missing: $err"
grep -q '^INFO' <<<"$err" && fail "default level (warn) printed INFO lines: $err"

err=$(SIEVE_LOG_LEVEL=none SIEVE_NSOCK=2 "$bench" "${small[@]}" 2>&1 >/dev/null)
grep -q 'NET/Sieve' <<<"$err" && fail "SIEVE_LOG_LEVEL=none still printed Sieve's lines: $err"

err=$(SIEVE_LOG_LEVEL=info "$info" --json 2>&1 >/dev/null)
grep -q '^INFO NET/Sieve initialised' <<<"$err" || fail "SIEVE_LOG_LEVEL=info: sieve-info printed no INFO line: $err"
[[ $failures -eq 0 ]] && echo "SIEVE_LOG_LEVEL is honoured by sieve-bench and sieve-info"
exit $((failures > 0))
