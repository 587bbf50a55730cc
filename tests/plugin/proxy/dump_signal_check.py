#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 34, item 6: SIEVE_DUMP_SIGNAL is handled from the moment the library is preloaded, before
any NCCL call: a rank hung in NCCL's init must report on SIGUSR1, not die of it (exit 138). A shell
preloading the library sends itself the signal and must live on; with SIEVE_DUMP_SIGNAL=off it dies
of it, as without Sieve. Usage: dump_signal_check.py LIBRARY"""
import os
import signal
import subprocess
import sys


def run(library, setting):
    env = dict(os.environ, LD_PRELOAD=library, SIEVE_DUMP_SIGNAL=setting, SIEVE_LOG_LEVEL="info")
    return subprocess.run(["/bin/sh", "-c", "kill -USR1 $$; sleep 0.5; echo alive"], env=env, capture_output=True,
                          text=True, timeout=60)


def main():
    library = sys.argv[1]
    on = run(library, "usr1")
    if on.returncode != 0 or "alive" not in on.stdout:
        print("FAIL: SIGUSR1 before any NCCL call killed the process (rc %d): %s" % (on.returncode, on.stderr))
        return 1
    if "no NCCL call has reached the proxy" not in on.stderr:
        print("FAIL: no report on SIGUSR1: %r" % on.stderr)
        return 1
    off = run(library, "off")
    if off.returncode != -signal.SIGUSR1 and off.returncode != 128 + signal.SIGUSR1:
        print("FAIL: with SIEVE_DUMP_SIGNAL=off the signal keeps its default action (rc %d)" % off.returncode)
        return 1
    print("ok: handled at load, default action when off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
