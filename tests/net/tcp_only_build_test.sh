#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A TCP-only build: rdma-core's headers hidden from a fresh configure (CMAKE_IGNORE_PATH over the
# directory holding infiniband/verbs.h, what a machine without libibverbs-dev looks like), SIEVE_VERBS
# left at AUTO. The configure must say "transports TCP only", the library and sieve-info must build
# without net/ib/, sieve-info must report the build as TCP only, the plugin must start on TCP and
# SIEVE_TRANSPORT=ib must fail naming the missing verbs. CUDA, tests and benchmarks stay off so the
# build is the library and one tool (a few minutes on 2 cores; through ccache, which a fresh configure
# picks up by itself where it is installed, reruns take seconds: checked too).
#   tcp_only_build_test.sh SOURCE_DIR VERBS_INCLUDE_DIR WORK_DIR
set -euo pipefail
source_dir=$1 verbs_include=$2 work=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -f $verbs_include/infiniband/verbs.h ]] || fail "$verbs_include/infiniband/verbs.h missing: nothing to hide"
rm -rf "$work"
args=(-S "$source_dir" -B "$work" -DSIEVE_VERBS=AUTO "-DCMAKE_IGNORE_PATH=$verbs_include" -DSIEVE_CUDA=OFF
      -DSIEVE_BUILD_TESTS=OFF -DSIEVE_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Release)
configure=$(cmake "${args[@]}" 2>&1) || { echo "$configure"; fail "configure failed"; }
grep -q "Sieve: transports TCP only (SIEVE_VERBS=AUTO: no infiniband/verbs.h" <<<"$configure" ||
  { echo "$configure"; fail "no 'transports TCP only' status line"; }
cmake --build "$work" -j2 --target nccl-net-sieve sieve-info >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "the TCP-only library or sieve-info did not build"; }
if grep -q "ib_transport.cc" "$work/build.log"; then fail "net/ib/ was compiled"; fi
if command -v ccache >/dev/null && ! grep -q "ccache " "$work/net/CMakeFiles/sieve_net.dir/build.make"; then
  fail "ccache is installed but a fresh configure does not compile through it"
fi
library=$(find "$work" -name 'libnccl-net-sieve.so*' -type f | head -1)
info=$(find "$work" -name sieve-info -type f -perm -u+x | head -1)
[[ -n $library && -n $info ]] || fail "library or sieve-info not found under $work"

json=$(env -u SIEVE_TRANSPORT "$info" --plugin "$library" --json) || fail "sieve-info failed on the TCP-only build"
python3 - "$json" <<'PY' || fail "sieve-info's report of the TCP-only build"
import json, sys
r = json.loads(sys.argv[1])
assert r["rdma"]["built"] is False, r["rdma"]
assert "no verbs transport" in r["rdma"]["error"], r["rdma"]
assert r["transport"]["name"] == "tcp", r["transport"]
assert "no verbs transport" in r["transport"]["why"], r["transport"]
assert r["plugin"]["error"] == "", r["plugin"]
PY
text=$("$info" --plugin "$library") || fail "sieve-info (text) failed on the TCP-only build"
[[ ${text%%$'\n'*} == *"(TCP only: built without verbs)" ]] || fail "text report's first line: ${text%%$'\n'*}"
if out=$(SIEVE_TRANSPORT=ib "$info" --plugin "$library" 2>&1); then fail "SIEVE_TRANSPORT=ib accepted"; fi
grep -q "SIEVE_TRANSPORT=ib, but this build of Sieve has no verbs transport" <<<"$out" ||
  { echo "$out"; fail "SIEVE_TRANSPORT=ib does not name the missing verbs"; }
rm -rf "$work"
echo "TCP-only build: configured, built, and reported as such"
