#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: installs packages, checks the formatting of the sources (tools/check-format.sh),
# builds, runs each libFuzzer target for a short fixed time,
# builds the GPU kit (where nvcc is; its tests, label gpu-kit, then find it built instead of
# compiling it beside the other tests), runs the whole suite (every test has its own timeout), then
# the collective proxy's tests again under ThreadSanitizer and AddressSanitizer (those tests only,
# in their own build trees, to keep CI short). Last, tools/test-report.py prints the suites this host
# was expected to run against those that ran, and fails the command when one that this host can run
# did not (torch installed but the Python suites skipped, a CUDA toolkit but no interposer tests, ...).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
fuzz_build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
"$root/tools/install-deps.sh"
"$root/tools/check-format.sh"
"$root/tools/build.sh"
rm -f "$build/ctest-junit.xml" "$fuzz_build/ctest-junit.xml"  # a result of an earlier run is no result
"$root/tools/fuzz.sh"
kit_status=0
GPU_KIT_BUILD_DIR="$build/gpu-kit-build" "$root/tools/gpu/bundle.sh" "$build/gpu-kit" || kit_status=$?
((kit_status == 0 || kit_status == 77)) || exit "$kit_status"  # 77: no CUDA toolkit, no kit

# What this host has, each probed here and not taken from the build's configuration, so that a suite
# the configure step dropped is seen as missing. install-deps.sh has just installed torch, the newest
# torch in its second environment (torch-newest: every Python suite runs again as <test>_newest) with
# torchtitan, and the venv (it fails otherwise), and clang; the rest are facts of the machine. A test carrying
# needs-<what> may skip only where <what> is absent (tools/test-report.py).
have=(torch torch-newest torchtitan venv)
command -v clang++ >/dev/null && have+=(clang)
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] && have+=(cuda-toolkit)
nvidia-smi -L >/dev/null 2>&1 && have+=(gpu)
command -v nvidia-smi >/dev/null || ldconfig -p | grep -q 'libcuda\.so\.1 ' || have+=(no-gpu-driver)
[[ -n $(ls /sys/class/infiniband 2>/dev/null) ]] && have+=(rdma)
grep -q ' lo$' /proc/net/if_inet6 2>/dev/null && have+=(ipv6)
if [[ $(id -u) -eq 0 ]]; then
  have+=(root)
  unshare --net sh -c 'ip link add sieve-probe0 type veth peer name sieve-probe1' 2>/dev/null && have+=(netns)
  setpriv --bounding-set=-net_admin true 2>/dev/null && have+=(cap-drop)
  setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$build/CMakeCache.txt" 2>/dev/null &&
    have+=(nobody-reads-build)
fi

status=0
# Label flaky is gone: no test is excused. Each ctest run leaves its JUnit file for the report.
(cd "$build" && ctest --output-on-failure --timeout 300 -j 2 --output-junit "$build/ctest-junit.xml") || status=$?
runs=(--run "$build" "$build/ctest-junit.xml")
[[ -f $fuzz_build/ctest-junit.xml ]] && runs+=(--run "$fuzz_build" "$fuzz_build/ctest-junit.xml")
"$root/tools/sanitize-proxy.sh" || status=$?
expect=(--expect compress --expect topology --expect net --expect plugin --expect tools --expect docs)
python3 "$root/tools/test-report.py" "${runs[@]}" "${have[@]/#/--have=}" "${expect[@]}" || status=$?
exit "$status"
