#!/usr/bin/env bash
# Installs the Debian packages Sieve builds, tests, packages (dpkg-dev and file: CPack's DEB generator;
# lintian and man-db: the package's checks) and benchmarks with. Idempotent and quiet when everything is already there (no apt-get update
# then), so CI reruns stay fast.
set -euo pipefail

packages=(build-essential dpkg-dev file cmake pkg-config git libgtest-dev libgmock-dev googletest libbenchmark-dev
          libhwloc-dev hwloc libibverbs-dev iproute2 iperf3 clang libclang-rt-14-dev python3 procps
          libnetfilter-queue-dev iptables lintian man-db)
# Extra packages a caller asks for (the demo adds python3-torch for the Gloo comparison).
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or install them yourself)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
