#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The command-line contract every Sieve tool keeps: --help exits 0 and lists every option, --version
# prints "<tool> <version>" and exits 0, and a bad value exits 2 with a message naming its option.
# --help names no file of Sieve's source tree (tools/..., tests/...): an installed tool's user has none.
#
#   cli_contract_test.sh TOOL VERSION 'OPTION...' COMMAND... [-- BAD...]
#
# BAD is one bad command line with its words joined by '|' (--seconds|0), optionally preceded by the
# option the message must name and '@' (--loss@--queue|0|--loss|200%); without it, the first word
# that starts with --.
set -uo pipefail
tool=$1 version=$2 options=$3
shift 3
command=()
while [[ $# -gt 0 && $1 != -- ]]; do command+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$("${command[@]}" --help 2>/tmp/cli_contract_err.$$); status=$?
[[ $status -eq 0 ]] || fail "$tool --help exits $status: $(cat /tmp/cli_contract_err.$$)"
for option in $options; do
  grep -q -- "$option\b" <<<"$out" || fail "$tool --help does not list $option"
done
source_paths=$(grep -Eo '(^|[^[:alnum:]_/.-])(tools|tests)/[[:alnum:]_./-]+' <<<"$out")
[[ -z $source_paths ]] || fail "$tool --help names files of the source tree: $source_paths"

out=$("${command[@]}" --version 2>&1); status=$?
[[ $status -eq 0 ]] || fail "$tool --version exits $status: $out"
[[ $out == "$tool $version" ]] || fail "$tool --version prints '$out', expected '$tool $version'"

for bad in "$@"; do
  option=""
  [[ $bad == *@* ]] && { option=${bad%%@*}; bad=${bad#*@}; }
  IFS='|' read -r -a words <<<"$bad"
  if [[ -z $option ]]; then
    for word in "${words[@]}"; do [[ $word == --* ]] && { option=$word; break; }; done
  fi
  err=$("${command[@]}" "${words[@]}" 2>&1 >/dev/null); status=$?
  [[ $status -eq 2 ]] || fail "$tool ${words[*]} exits $status, expected 2: $err"
  grep -q -- "$option" <<<"$err" || fail "$tool ${words[*]}: the message does not name $option: $err"
  [[ $(wc -l <<<"$err") -le 3 ]] || fail "$tool ${words[*]}: a usage dump instead of one clear line: $err"
done
rm -f /tmp/cli_contract_err.$$
[[ $failures -eq 0 ]] && echo "$tool: command-line contract kept"
exit $((failures > 0))
