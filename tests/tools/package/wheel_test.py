#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`pip install .` from the checkout's root as a user runs it, into a scratch directory: the wheel builds the
library with CMake (scikit-build-core) and carries it inside the package; sieve.library_path()
returns it; `python -m sieve` names it, its preload state, the NCCL it would interpose and the
exact variables; `python -m sieve run -- CMD` runs CMD with NCCL_NET_PLUGIN and LD_PRELOAD set to
its absolute path, so CMD has it preloaded.

    wheel_test.py SOURCE_DIR BUILD_DIR      (exit 77: no scikit-build-core in this Python)

The CMake build goes to BUILD_DIR/wheel-build and is kept, so a rerun only relinks; it leaves out
the CUDA parts (CMAKE_CUDA_COMPILER=NOTFOUND), which the main build covers, to keep CI short.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def metadata(source, site):
    """The wheel's metadata: the project's one version, the license as an SPDX expression with its text,
    the torch extra."""
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        version = re.search(r"project\(sieve VERSION ([0-9.]+)", f.read()).group(1)
    info = os.path.join(site, "nccl_net_sieve-%s.dist-info" % version)
    check(os.path.isdir(info), "no %s: the wheel's version is not project()'s %s (%s)" % (
        info, version, sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))))
    if not os.path.isdir(info):
        return
    with open(os.path.join(info, "METADATA")) as f:
        fields = f.read().split("\n\n", 1)[0].splitlines()
    for wanted in ("Version: " + version, "License-Expression: Apache-2.0", "Provides-Extra: torch",
                   "Classifier: Typing :: Typed", "Description-Content-Type: text/markdown"):
        check(wanted in fields, "the wheel's METADATA lacks %r" % wanted)
    check(any(f.startswith("Requires-Dist: torch") and 'extra == "torch"' in f for f in fields),
          "the torch extra requires no torch")
    check(os.path.isfile(os.path.join(info, "licenses", "LICENSE")), "the wheel carries no LICENSE")
    found = subprocess.run([sys.executable, "-c", "import sieve; print(sieve.__version__)"], capture_output=True,
                           text=True, timeout=120, cwd=site,
                           env={k: v for k, v in os.environ.items() if k != "SIEVE_LIBRARY"})
    check(found.stdout.strip() == version, "sieve.__version__ from the wheel is %r, not %s: %s" % (
        found.stdout.strip(), version, found.stderr[-500:]))


def main():
    source, build = sys.argv[1], sys.argv[2]
    if importlib.util.find_spec("scikit_build_core") is None:
        print("skipped: %s has no scikit-build-core (tools/install-deps.sh installs it)" % sys.executable)
        return 77
    settings = ["build-dir=" + os.path.join(build, "wheel-build"), "cmake.define.CMAKE_CUDA_COMPILER=NOTFOUND",
                "cmake.define.SIEVE_CUDA=OFF"]
    if shutil.which("ccache"):
        settings += ["cmake.define.CMAKE_%s_COMPILER_LAUNCHER=ccache" % lang for lang in ("C", "CXX")]
    work = tempfile.mkdtemp(prefix="sieve-wheel-")
    try:
        site = os.path.join(work, "site")
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--no-build-isolation", "--target", site, source]
        install += ["--config-settings=" + s for s in settings]
        done = subprocess.run(install, capture_output=True, text=True, timeout=1500, cwd=work)
        check(done.returncode == 0, "pip install . failed:\n" + (done.stdout + done.stderr)[-3000:])
        if failures:
            return 1
        library = os.path.join(site, "sieve", "libnccl-net-sieve.so")
        check(os.path.isfile(library), "the wheel did not put the library in the package (%s)" % library)
        check(os.path.isfile(os.path.join(site, "sieve", "py.typed")), "the wheel has no py.typed: hints unseen")
        metadata(source, site)
        env = {k: v for k, v in os.environ.items() if k not in ("SIEVE_LIBRARY", "LD_PRELOAD", "NCCL_NET_PLUGIN")}
        env["PYTHONPATH"] = site

        def python(*args, **kwargs):
            return subprocess.run([sys.executable] + list(args), env=kwargs.pop("env", env), capture_output=True,
                                  text=True, timeout=300, cwd=work, **kwargs)

        found = python("-c", "import sieve; print(sieve.library_path()); print(sieve.__file__)")
        lines = found.stdout.split()
        check(found.returncode == 0 and lines[:1] == [library] and lines[1].startswith(site),
              "library_path() / the package: %r %s" % (lines, found.stderr[-500:]))
        told = python("-m", "sieve")
        out = told.stdout
        print(out)
        check(told.returncode == 0, "python -m sieve exited %d: %s" % (told.returncode, told.stderr))
        check("library: %s\n" % library in out, "python -m sieve does not name the wheel's library")
        check("preloaded in this process: no" in out, "python -m sieve claims a preload")
        check("export NCCL_NET_PLUGIN=%s\n" % library in out and "export LD_PRELOAD=%s\n" % library in out,
              "python -m sieve does not give both variables by absolute path")
        nccl = re.search(r"NCCL it would interpose: (\S+) \(version (\S+)\)", out)
        try:
            import nvidia.nccl  # noqa: F401 (the nvidia-nccl wheel PyTorch's pip wheels bring)
            check(nccl and nccl.group(1).endswith("nvidia/nccl/lib/libnccl.so.2") and
                  re.fullmatch(r"2\.\d+\.\d+", nccl.group(2)), "python -m sieve does not name the wheel's NCCL")
        except ImportError:
            check("none found" in out, "python -m sieve names an NCCL that is not there")
        # run: the command gets both variables and really has the library preloaded
        probe = ("import os, sieve; print(os.environ['NCCL_NET_PLUGIN']); print(os.environ['LD_PRELOAD']); "
                 "print(sieve._library._loaded_path()); print(sieve.library().sieve_version().decode())")
        ran = python("-m", "sieve", "run", "--", sys.executable, "-c", probe)
        lines = ran.stdout.split()
        check(ran.returncode == 0 and lines[:3] == [library] * 3,
              "python -m sieve run: %r %s" % (lines, ran.stderr[-500:]))
        status = python("-m", "sieve", "run", "--", sys.executable, "-c", "import sys; sys.exit(5)")
        check(status.returncode == 5, "run does not pass the command's status on: %d" % status.returncode)
        usage = python("-m", "sieve", "run")
        check(usage.returncode == 2 and "usage" in usage.stderr, "run without a command: %d" % usage.returncode)
        missing = python("-m", "sieve", "run", "--", "/nonexistent/cmd")
        check(missing.returncode == 127 and "cannot run /nonexistent/cmd" in missing.stderr,
              "run of a missing command: %d %s" % (missing.returncode, missing.stderr))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not failures:
        print("pip install .: the wheel carries the library; python -m sieve and run use it")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
