#!/usr/bin/env bash
# The collective proxy's CPU tests (ctest label `consistency`: commits, groups, captures, aborts from
# other threads, the random-schedule property test) built and run under ThreadSanitizer and under
# AddressSanitizer + UBSan, each in its own build tree beside the main one. Only those targets are
# built, so this stays a few minutes on two cores. Any report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
targets=(proxy_proxy_test proxy_learned_test proxy_collectives_test proxy_fsdp_test proxy_consistency_test proxy_hang_dump_test
         proxy_allocation_test proxy_lifetime_test proxy_capture_test
         proxy_violation_test)
for sanitizer in thread address; do
  dir="$build-proxy-$sanitizer"
  echo "sanitize-proxy: $sanitizer build in $dir"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIEVE_SANITIZE="$sanitizer" >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"
  # halt_on_error: a report is a failure, not a line in a log nobody reads.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="halt_on_error=1 detect_leaks=1" \
    UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" \
    ctest --test-dir "$dir" -L consistency --output-on-failure --timeout 600 -j 2
done
