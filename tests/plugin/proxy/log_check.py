# SPDX-License-Identifier: Apache-2.0
"""The collective proxy's log in a job that preloads Sieve without using it as NCCL's net plugin
(so the plugin's init never runs): a configuration problem is still warned, once; SIEVE_LOG_LEVEL
still governs stderr; every line has the one format "LEVEL NET/Sieve message".
Usage: log_check.py LIBRARY   (runs itself as the child: log_check.py LIBRARY --child)"""

import ctypes
import os
import subprocess
import sys


def child(library):
    lib = ctypes.CDLL(library)
    for _ in range(3):  # no libnccl here: each call fails cleanly; the proxy starts on the first
        lib.ncclGroupStart()


def run(library, extra_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_") and k != "LD_PRELOAD"}
    env.update(extra_env)
    done = subprocess.run([sys.executable, __file__, library, "--child"], capture_output=True, text=True,
                          timeout=60, env=env)
    return done.returncode, [line for line in done.stderr.splitlines() if line]


def main():
    library = sys.argv[1]
    if len(sys.argv) > 2:
        child(library)
        return
    failures = []
    rc, lines = run(library, {"SIEVE_NSOCK": "2"})
    said = [line for line in lines if "SIEVE_NSOCK" in line]
    if rc != 0 or len(said) != 1:
        failures.append("a misspelt variable under the proxy alone: exit %d, warned %d times: %s"
                        % (rc, len(said), lines))
    about_nccl = [line for line in lines if "NCCL" in line]
    if len(about_nccl) != 1:
        failures.append("the missing NCCL should be said once, in one line: %s" % about_nccl)
    for line in lines:
        if not line.startswith(("WARN NET/Sieve ", "INFO NET/Sieve ")):
            failures.append("a line in another format: %r" % line)
    rc, lines = run(library, {"SIEVE_LOG_LEVEL": "none"})
    if lines:
        failures.append("SIEVE_LOG_LEVEL=none under the proxy alone still printed: %s" % lines)
    for failure in failures:
        print("FAIL:", failure)
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
