#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every CPU suite of the collective proxy (each proxy_* test binary: the suites against the fake
# backend, the allocation count; not the GPU suites, which skip without a device) built and run under
# ThreadSanitizer and under AddressSanitizer + UBSan, each in its own build tree beside the main one.
# Only those targets are built (through ccache when it is installed: CMakeLists.txt's SIEVE_CCACHE). The Python-hosted proxy checks
# cannot host a sanitizer runtime (tests/plugin/proxy/CMakeLists.txt) and run in the plain build. Any
# report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
for sanitizer in thread address; do
  dir="$build-proxy-$sanitizer"
  echo "sanitize-proxy: $sanitizer build in $dir"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIEVE_SANITIZE="$sanitizer" >/dev/null
  # Every proxy suite the tree defines, whatever its label: no list here to forget one in.
  # The GPU suites (proxy_gpu_*) only skip without a device: built here they would prove nothing.
  mapfile -t targets < <(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \(proxy_[a-z0-9_]*_test\)$/\1/p' |
                         grep -v '^proxy_gpu_')
  [ "${#targets[@]}" -gt 0 ] || { echo "sanitize-proxy: no proxy suite found in $dir" >&2; exit 1; }
  cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"
  # halt_on_error: a report is a failure, not a line in a log nobody reads.
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="halt_on_error=1 detect_leaks=1" \
    UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
  for target in "${targets[@]}"; do
    binary=$(find "$dir/tests" -type f -name "$target" -perm -u+x | head -n 1)
    [ -n "$binary" ] || { echo "sanitize-proxy: $target was not built" >&2; exit 1; }
    echo "sanitize-proxy: $sanitizer: $target"
    timeout 600 "$binary" --gtest_brief=1
  done
  unset TSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS
done
echo "sanitize-proxy: every proxy suite is clean under ThreadSanitizer and AddressSanitizer + UBSan"
