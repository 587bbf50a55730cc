#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`pip install -e .` as a developer runs it, into a fresh virtual environment: the package then runs
from the checkout (tools/python/sieve), while the library its build installed lies in the
environment's site-packages/sieve/. `python -m sieve` must still name that library and `--version` its
build id, and `python -m sieve run -- CMD` preload it; `pip uninstall nccl-net-sieve` removes the install.

    editable_test.py SOURCE_DIR BUILD_DIR      (exit 77: no scikit-build-core in this Python)

No package index: the fresh environment sees this Python's site-packages (scikit-build-core) through a
.pth file and builds without isolation, into BUILD_DIR/wheel-build, the tree package_wheel keeps.
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def main():
    source, build = sys.argv[1], sys.argv[2]
    if importlib.util.find_spec("scikit_build_core") is None:
        print("skipped: %s has no scikit-build-core (tools/install-deps.sh installs it)" % sys.executable)
        return 77
    work = tempfile.mkdtemp(prefix="sieve-editable-")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SIEVE_LIBRARY", "LD_PRELOAD", "NCCL_NET_PLUGIN", "PYTHONPATH")}

    def run(argv, timeout=300):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work, env=env)
        print("$ %s -> %d\n%s%s" % (" ".join(argv), done.returncode, done.stdout[-3000:], done.stderr[-3000:]))
        return done

    try:
        venv = os.path.join(work, "venv")
        python = os.path.join(venv, "bin", "python")
        check(run(["/usr/bin/python3", "-m", "venv", venv]).returncode == 0, "python3 -m venv failed")
        site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
        with open(os.path.join(site, "build-tools.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")
        settings = ["build-dir=" + os.path.join(build, "wheel-build"), "cmake.define.CMAKE_CUDA_COMPILER=NOTFOUND",
                    "cmake.define.SIEVE_CUDA=OFF"]
        installed = run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                         "--no-index", "--no-build-isolation", "-e", source] +
                        ["--config-settings=" + s for s in settings], timeout=1500)
        check(installed.returncode == 0, "pip install -e . failed")
        if failures:
            return 1
        library = os.path.join(site, "sieve", "libnccl-net-sieve.so")
        told = run([python, "-m", "sieve"])
        check(told.returncode == 0 and "library: %s\n" % library in told.stdout,
              "python -m sieve after pip install -e . does not name %s" % library)
        check(os.path.join(source, "tools", "python", "sieve") in told.stdout,
              "the package does not run from the checkout: not an editable install")
        said = run([python, "-m", "sieve", "--version"]).stdout
        check(re.fullmatch(r"[0-9.]+ \(build ([0-9a-f]{12}(-dirty)?|src-[0-9a-f]{12})\)\n", said),
              "python -m sieve --version after pip install -e . says %r" % said)
        probe = "import sieve; print(sieve._library._loaded_path()); print(sieve.library().sieve_version().decode())"
        ran = run([python, "-m", "sieve", "run", "--", python, "-c", probe])
        check(ran.returncode == 0 and ran.stdout.split()[:1] == [library],
              "run does not preload the editable's library")
        removed = run([python, "-m", "pip", "uninstall", "--yes", "--disable-pip-version-check", "nccl-net-sieve"])
        left = [name for name in os.listdir(site) if "sieve" in name]
        check(removed.returncode == 0 and not left, "pip uninstall nccl-net-sieve left %r" % left)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not failures:
        print("pip install -e .: python -m sieve finds and preloads the library the build installed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
