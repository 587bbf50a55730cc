#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/package/uninstall.cmake (the `uninstall` target) removes the files a manifest lists and the
# Sieve-only directories they leave empty, says which were already gone, touches nothing else, and
# refuses without a manifest. A hand-made manifest under a temporary prefix: no install needed.
#
#   uninstall_test.sh SCRIPT
set -uo pipefail
script=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/usr/local
mkdir -p "$prefix/lib/cmake/Sieve" "$prefix/share/sieve" "$prefix/bin"
for f in lib/libnccl-net-sieve.so lib/cmake/Sieve/SieveConfig.cmake share/sieve/netlab.sh bin/sieve-info; do
  echo x >"$prefix/$f"
  echo "$prefix/$f" >>"$work/install_manifest.txt"
done
echo "$prefix/bin/sieve-gone" >>"$work/install_manifest.txt"  # removed by hand before
echo keep >"$prefix/lib/other.so"                             # not in the manifest

out=$(cmake -DMANIFEST="$work/install_manifest.txt" -P "$script" 2>&1) || fail "uninstall failed: $out"
for f in lib/libnccl-net-sieve.so lib/cmake/Sieve/SieveConfig.cmake share/sieve/netlab.sh bin/sieve-info; do
  [[ ! -e $prefix/$f ]] || fail "$f is still there"
done
[[ ! -d $prefix/share/sieve && ! -d $prefix/lib/cmake/Sieve ]] || fail "Sieve's empty directories stay: $(find "$prefix")"
[[ -f $prefix/lib/other.so && -d $prefix/bin ]] || fail "removed what the manifest does not list: $(find "$prefix")"
grep -q "Already gone: $prefix/bin/sieve-gone" <<<"$out" || fail "the missing file is not reported: $out"
grep -q "4 file(s) removed" <<<"$out" || fail "no count: $out"

out=$(cmake -DMANIFEST="$work/none.txt" -P "$script" 2>&1) && fail "no manifest, yet it succeeded: $out"
tr -s " \n" " " <<<"$out" | grep -q "nothing was installed from this build" || fail "no reason without a manifest: $out"
[[ $failures -eq 0 ]] && echo "uninstall removes the manifest's files and Sieve's emptied directories only"
exit $((failures > 0))
