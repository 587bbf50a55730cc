# SPDX-License-Identifier: Apache-2.0
"""run.sh --installed: the library and Python package an operator ships (the wheel or the .deb), not
the kit's own copies, so the NCCL steps test what the node's jobs will run.

    installed.py PYTHON    prints the library of PYTHON's installed package `sieve` (exit 0), or the
                           line that says why it cannot serve (exit 1): no package, or its doctor
                           (`python -m sieve --require proxy`) fails: a library that cannot load, or
                           one without the collective proxy.

PYTHON runs isolated (-I) from a scratch directory: neither the kit's python/ nor the current
directory nor PYTHONPATH can stand in for what is installed.
"""

import os
import subprocess
import sys
import tempfile

FIND = ("import sieve, os; print(os.path.realpath(sieve.library_path())); "
        "print(os.path.realpath(os.path.dirname(sieve.__file__)))")


def installed(python):
    """(library, package directory, "") or ("", "", why not)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD", "SIEVE_LIBRARY")}
    with tempfile.TemporaryDirectory() as cwd:
        try:
            found = subprocess.run([python, "-I", "-c", FIND], cwd=cwd, env=env, capture_output=True, text=True,
                                   timeout=120)
        except (OSError, subprocess.SubprocessError) as error:
            return "", "", "%s cannot run: %s" % (python, error)
        lines = found.stdout.split()
        if found.returncode != 0 or len(lines) != 2:
            said = (found.stderr.strip().splitlines() or ["no output"])[-1]
            return "", "", "%s has no installed Sieve package with its library (%s)" % (python, said)
        doctor = subprocess.run([python, "-I", "-m", "sieve", "--require", "proxy"], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=300)
    if doctor.returncode != 0:
        said = (doctor.stderr.strip().splitlines() or ["exit %d" % doctor.returncode])[-1]
        return "", "", "the installed Sieve cannot serve the NCCL steps: %s" % said
    return lines[0], lines[1], ""


def main():
    library, package, why = installed(sys.argv[1])
    if why:
        print(why)
        return 1
    print(library)
    print(package)
    return 0


if __name__ == "__main__":
    sys.exit(main())
