#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two copies of the library on one machine: the .deb's and a /usr/local install.
#  1. sieve-info lists every copy the loader finds, in its order, and which one a load by name takes
#     (NCCL_NET_PLUGIN=sieve, LD_PRELOAD=libnccl-net-sieve.so): here the first on LD_LIBRARY_PATH.
#  2. An installed sieve-info whose own copy is not the one loaded by name fails the check, saying so.
#  3. With the plugin named by path and another copy preloaded, each process logs one warning; with
#     the same file for both, none.
#
#   two_copies_test.sh LIBRARY SIEVE_INFO SIEVE_BENCH
set -uo pipefail
lib=$1 info=$2 bench=$3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=libnccl-net-sieve.so
mkdir -p "$work/a" "$work/b"
cp "$lib" "$work/a/$name"
cp "$lib" "$work/b/$name"

# 1. Both copies, in LD_LIBRARY_PATH's order; the first is the one loaded by name.
LD_LIBRARY_PATH="$work/a:$work/b" "$info" --json >"$work/info.json" 2>/dev/null
python3 - "$work" <<'PY' || fail "sieve-info --json: $(head -c 600 "$work/info.json")"
import json, sys
work = sys.argv[1]
copies = json.load(open(work + "/info.json"))["copies"]
found = [c["path"] for c in copies["found"] if c["found_by"] == "LD_LIBRARY_PATH"]
assert found == [work + "/a/libnccl-net-sieve.so", work + "/b/libnccl-net-sieve.so"], copies
assert copies["by_name"] == work + "/a/libnccl-net-sieve.so", copies
assert [c["loaded_by_name"] for c in copies["found"]][:2] == [True, False], copies
PY
text=$(LD_LIBRARY_PATH="$work/a:$work/b" "$info" 2>/dev/null)
grep -q "$work/a/$name  (LD_LIBRARY_PATH): NCCL_NET_PLUGIN=sieve and LD_PRELOAD=$name load this one" <<<"$text" ||
  fail "the text does not say which copy a load by name takes: $(grep -A4 '^Copies' <<<"$text")"

# 2. An installed sieve-info (PREFIX/bin beside PREFIX/lib/...) while the loader takes another copy.
prefix=$work/usr
libdir=$(sed -n 's|^  PREFIX/\(.*\)/libnccl-net-sieve.so .*|\1|p' <<<"$("$info" --help)")
[[ -n $libdir ]] || fail "sieve-info --help names no PREFIX/LIBDIR"
mkdir -p "$prefix/bin" "$prefix/$libdir"
cp "$info" "$prefix/bin/sieve-info"
cp "$lib" "$prefix/$libdir/$name"
err=$(cd / && SIEVE_SOCKET_IFNAME==lo LD_LIBRARY_PATH="$work/b" "$prefix/bin/sieve-info" 2>&1 >/dev/null)
status=$?
[[ $status -eq 1 ]] || fail "exit status $status where jobs load another copy: $err"
grep -q "load $work/b/$name, not $prefix/$libdir/$name checked here" <<<"$err" ||
  fail "no problem naming both copies: $err"
err=$(cd / && SIEVE_SOCKET_IFNAME==lo LD_LIBRARY_PATH="$prefix/$libdir" "$prefix/bin/sieve-info" 2>&1 >/dev/null) ||
  fail "the installed copy is the one loaded by name, yet: $err"

# 3. The library's own warning, once per process: sieve-bench's two nodes each map both copies.
run() {  # PRELOAD PLUGIN
  LD_PRELOAD=$1 "$bench" --loopback --nodes 2 --plugin "$2" --model resnet18 --modes dense --steps 1 --warmup 0 \
    --rate none --quiet --timeout 60 2>&1
}
out=$(run "$lib" "$work/a/$name")
said=$(grep -c "copies of the library are mapped in this process" <<<"$out")
[[ $said -eq 2 ]] || fail "two copies in each of 2 nodes: $said warnings, expected 2: $out"
grep -q "$work/a/$name" <<<"$(grep "copies of the library" <<<"$out")" || fail "the warning does not name the copies: $out"
out=$(run "$lib" "$lib")
said=$(grep -c "copies of the library are mapped" <<<"$out")
[[ $said -eq 0 ]] || fail "one file preloaded and named: $said warnings: $out"
[[ $failures -eq 0 ]] && echo "copies listed, the by-name one named, the mismatch refused, the warning said once per process"
exit $((failures > 0))
