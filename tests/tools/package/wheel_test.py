#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The deployable wheel as a user gets it: tools/build-wheel.sh (`pip wheel` of the checkout, then
`auditwheel repair`) builds it; its tag is py3-none-manylinux_2_X_x86_64, and every library it carries
finds what it needs inside the wheel (libhwloc bundled, the RPATH pointing at it) or in the manylinux
set of system libraries (libc, libstdc++, ...; CUDA's driver and NCCL are found at run time, never
linked). `pip install` of that wheel into a scratch directory: the wheel carries the library inside the
package; sieve.library_path() returns it; `python -m sieve` names it, its preload state, the NCCL it
would interpose and the exact variables; `python -m sieve run -- CMD` runs CMD with NCCL_NET_PLUGIN and
LD_PRELOAD set to its absolute path, so CMD has it preloaded.

    wheel_test.py SOURCE_DIR BUILD_DIR      (exit 77: no scikit-build-core in this Python)

The wheel is left in BUILD_DIR/wheel for wheel_no_hwloc_test.py. The CMake build goes to
BUILD_DIR/wheel-build and is kept, so a rerun only relinks; it leaves out the CUDA parts
(SIEVE_CUDA=OFF), which the main build covers, to keep CI short.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def version_of(source):
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        return re.search(r"project\(sieve VERSION ([0-9.]+)", f.read()).group(1)


def metadata(source, site):
    """The wheel's metadata: the project's one version, the license as an SPDX expression with its text,
    the torch extra."""
    version = version_of(source)
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


# What a manylinux wheel may take from the system (PEP 600: the libraries every such distribution has,
# those of auditwheel's policy that a C++ library can need). Nothing of CUDA or NCCL: the CUDA runtime
# is linked statically and finds libcuda.so.1 at run time, as the proxy finds the job's libnccl.so.2.
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libgcc_s.so.1",
                    "libstdc++.so.6", "ld-linux-x86-64.so.2", "libresolv.so.2", "libutil.so.1"}


def expected_build_id(source):
    """The build id as the build names it: the checkout's commit, 12 hex digits, "-dirty" with tracked files
    changed; a pattern of "src-" and a hash of the sources where git does not know the checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", source] + list(args), capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return r"src-[0-9a-f]{12}"
    return re.escape(commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""))


def build_wheel(source, build):
    """tools/build-wheel.sh into BUILD/wheel: the repaired wheel's path, or None."""
    out = os.path.join(build, "wheel")
    env = dict(os.environ, WHEEL_BUILD_DIR=os.path.join(build, "wheel-build"),
               PYTHON_VENV=os.path.dirname(os.path.dirname(sys.executable)))
    done = subprocess.run(["bash", os.path.join(source, "tools", "build-wheel.sh"), out,
                           "cmake.define.CMAKE_CUDA_COMPILER=NOTFOUND", "cmake.define.SIEVE_CUDA=OFF"],
                          capture_output=True, text=True, timeout=1500, env=env)
    print(done.stdout[-3000:])
    check(done.returncode == 0, "tools/build-wheel.sh failed:\n" + (done.stdout + done.stderr)[-3000:])
    wheels = [os.path.join(out, name) for name in os.listdir(out) if name.endswith(".whl")] if done.returncode == 0 \
        else []
    check(done.returncode != 0 or len(wheels) == 1, "tools/build-wheel.sh left %r in %s" % (wheels, out))
    return wheels[0] if len(wheels) == 1 else None


def check_tag(wheel):
    """py3-none-manylinux_2_X_x86_64 in the file's name and in its WHEEL record, and nothing else."""
    tag = re.fullmatch(r"nccl_net_sieve-[0-9.]+-(py3-none-manylinux_2_[0-9]+_x86_64)\.whl", os.path.basename(wheel))
    check(tag is not None, "the wheel is not tagged py3-none-manylinux_2_X_x86_64: %s" % os.path.basename(wheel))
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/WHEEL"))
        tags = [line.split(": ", 1)[1] for line in archive.read(record).decode().splitlines()
                if line.startswith("Tag: ")]
    check(tag is not None and tags == [tag.group(1)], "the WHEEL record's tags are %r" % tags)


def dynamic(path):
    """(NEEDED names, RPATH/RUNPATH directories with $ORIGIN resolved) of the ELF file at path."""
    shown = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", shown)
    paths = []
    for found in re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.+)\]", shown):
        paths += [os.path.normpath(p.replace("$ORIGIN", os.path.dirname(path))) for p in found.split(":")]
    return needed, paths


def check_needed(site):
    """Every library the wheel installed finds each library it needs in the wheel (through its own
    RPATH) or in the manylinux system set: the wheel needs no libhwloc on the node."""
    libraries = [os.path.join(d, name) for d, _, names in os.walk(site) for name in names if ".so" in name]
    check(any(os.path.basename(p).startswith("libhwloc") for p in libraries), "the wheel carries no libhwloc")
    for library in libraries:
        needed, paths = dynamic(library)
        for name in needed:
            inside = [p for p in paths if os.path.commonpath([p, site]) == site and
                      os.path.isfile(os.path.join(p, name))]
            check(name in SYSTEM_LIBRARIES or inside, "%s needs %s, which is neither in the wheel (RPATH %r) nor "
                  "a manylinux system library" % (os.path.relpath(library, site), name, paths))
            check(not re.match(r"lib(cuda|cudart|nccl)\.", name), "%s links %s, which must be found at run time"
                  % (os.path.relpath(library, site), name))


def main():
    source, build = sys.argv[1], sys.argv[2]
    if importlib.util.find_spec("scikit_build_core") is None:
        print("skipped: %s has no scikit-build-core (tools/install-deps.sh installs it)" % sys.executable)
        return 77
    wheel = build_wheel(source, build)
    if wheel is None:
        return 1
    check_tag(wheel)
    work = tempfile.mkdtemp(prefix="sieve-wheel-")
    try:
        site = os.path.join(work, "site")
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--no-index", "--target", site, wheel]
        done = subprocess.run(install, capture_output=True, text=True, timeout=600, cwd=work)
        check(done.returncode == 0, "pip install of the wheel failed:\n" + (done.stdout + done.stderr)[-3000:])
        if failures:
            return 1
        check_needed(site)
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
                 "print(sieve._library._loaded_path()); print(sieve.library().sieve_build_id().decode())")
        ran = python("-m", "sieve", "run", "--", sys.executable, "-c", probe)
        lines = ran.stdout.split()
        check(ran.returncode == 0 and lines[:3] == [library] * 3,
              "python -m sieve run: %r %s" % (lines, ran.stderr[-500:]))
        build_id = expected_build_id(source)
        check(len(lines) == 4 and re.fullmatch(build_id, lines[3]), "the library's sieve_build_id() is %r, not %s"
              % (lines[3:], build_id))
        said = python("-m", "sieve", "--version").stdout
        check(re.fullmatch(r"%s \(build %s\)\n" % (re.escape(version_of(source)), build_id), said),
              "python -m sieve --version says %r, not the version and build %s" % (said, build_id))
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
