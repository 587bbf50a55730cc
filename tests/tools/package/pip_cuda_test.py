# SPDX-License-Identifier: Apache-2.0
"""A pip build (scikit-build-core sets SKBUILD) that finds no CUDA compiler fails, saying the wheel
would have no collective proxy and how to build without it on purpose: pip shows a build's output
only when it fails, so a warning would go unseen. SIEVE_CUDA=OFF builds on. Only CMake's configure
step runs, as pyproject.toml's settings give it, in a scratch directory.

Run: python3 pip_cuda_test.py SOURCE_DIR SCRATCH_DIR"""

import shutil
import subprocess
import sys


def configure(source, build, *defines):
    shutil.rmtree(build, ignore_errors=True)
    command = ["cmake", "-S", source, "-B", build, "-DSKBUILD=2", "-DCMAKE_CUDA_COMPILER=NOTFOUND",
               "-DSIEVE_BUILD_TESTS=OFF", "-DSIEVE_BUILD_BENCHMARKS=OFF", "-DSIEVE_WERROR=OFF"] + list(defines)
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def main():
    source, build = sys.argv[1], sys.argv[2]
    failures = []
    refused = configure(source, build)
    text = " ".join((refused.stdout + refused.stderr).split())
    if refused.returncode == 0 or "this wheel would have no collective proxy" not in text or \
            "--config-settings=cmake.define.SIEVE_CUDA=OFF" not in text:
        failures.append("a pip build without nvcc: exit %d, output %s" % (refused.returncode, text[-1500:]))
    chosen = configure(source, build, "-DSIEVE_CUDA=OFF")
    if chosen.returncode != 0:
        failures.append("SIEVE_CUDA=OFF: exit %d, %s" % (chosen.returncode, chosen.stderr[-1500:]))
    shutil.rmtree(build, ignore_errors=True)
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print("a pip build without nvcc fails saying so; SIEVE_CUDA=OFF builds without the proxy")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
