#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The wheel on a node without hwloc: the wheel wheel_test.py built (BUILD_DIR/wheel/*.whl) is installed
with pip into a fresh virtual environment, and run in a mount namespace where every libhwloc of the
system is hidden (an empty file bound over it). There the system's libhwloc does not load, and still
`python -m sieve` succeeds and `python -m sieve run -- CMD` gives CMD the library preloaded and its C
API working: the wheel brings its own hwloc. Last, `pip uninstall nccl-net-sieve` leaves nothing of it.

    wheel_no_hwloc_test.py BUILD_DIR      (exit 77: not root, or no unshare; root is what hides files)
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def system_hwloc():
    """The files of every libhwloc the loader could find: its cache's entries and the usual directories."""
    cached = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout.split("\n")
    found = [line.rsplit(" => ", 1)[1] for line in cached if "libhwloc" in line and " => " in line]
    for directory in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/usr/local/lib"):
        found += glob.glob(os.path.join(directory, "libhwloc.so*"))
    return sorted({os.path.realpath(path) for path in found if os.path.exists(path)})


def main():
    build = sys.argv[1]
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("skipped: hiding the system's libhwloc needs root and unshare")
        return 77
    wheels = glob.glob(os.path.join(build, "wheel", "*.whl"))
    if len(wheels) != 1:
        print("FAIL: no single wheel in %s/wheel (package_wheel builds it): %r" % (build, wheels))
        return 1
    hidden = system_hwloc()
    print("hidden: %s" % " ".join(hidden))
    work = tempfile.mkdtemp(prefix="sieve-nohwloc-")
    try:
        empty = os.path.join(work, "empty")
        open(empty, "w").close()
        # A private mount namespace: the bind mounts vanish with the command, and no other process sees them.
        mounts = "".join("mount --bind %s %s && " % (empty, path) for path in hidden)
        in_root = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts + 'exec "$@"', "no-hwloc"]
        venv = os.path.join(work, "venv")
        python = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items()
               if k not in ("SIEVE_LIBRARY", "LD_PRELOAD", "NCCL_NET_PLUGIN", "PYTHONPATH", "LD_LIBRARY_PATH")}

        def run(argv, timeout=300):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work, env=env)
            print("$ %s -> %d\n%s%s" % (" ".join(argv[len(in_root):] if argv[:1] == ["unshare"] else argv),
                                        done.returncode, done.stdout, done.stderr[-2000:]))
            return done

        made = run(["/usr/bin/python3", "-m", "venv", venv])
        check(made.returncode == 0, "python3 -m venv failed")
        installed = run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
                         wheels[0]])
        check(installed.returncode == 0, "pip refused or failed to install %s" % os.path.basename(wheels[0]))
        if failures:
            return 1
        gone = run(in_root + [python, "-c", "import ctypes; ctypes.CDLL('libhwloc.so.15')"])
        check(gone.returncode != 0, "the system's libhwloc still loads in the namespace: the test proves nothing")
        doctor = run(in_root + [python, "-m", "sieve"])
        check(doctor.returncode == 0, "python -m sieve exited %d without a system hwloc" % doctor.returncode)
        probe = "import sieve; print(sieve._library._loaded_path()); print(sieve.library().sieve_version().decode())"
        ran = run(in_root + [python, "-m", "sieve", "run", "--", python, "-c", probe])
        lines = ran.stdout.split()
        check(ran.returncode == 0 and len(lines) == 2 and lines[0].endswith("/sieve/libnccl-net-sieve.so"),
              "the preloaded library does not work without a system hwloc: %d %r" % (ran.returncode, lines))
        check("cannot be preloaded" not in ran.stderr, "the loader refused the preload: " + ran.stderr[-500:])
        removed = run([python, "-m", "pip", "uninstall", "--yes", "--disable-pip-version-check", "nccl-net-sieve"])
        site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
        left = [name for name in os.listdir(site) if "sieve" in name]
        check(removed.returncode == 0 and not left, "pip uninstall nccl-net-sieve left %r" % left)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not failures:
        print("the wheel installs and runs where the system has no hwloc; pip uninstall removes it")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
