#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SIEVE_DUMP_SIGNAL's contract (docs/PROXY.md, hang forensics). Loading the preloaded library starts
nothing (a helper thread started at load made glibc abort `setpriv --clear-groups`, whose set-id
calls must reach every thread); the handler and its thread come with the
process's first interposed NCCL call (ncclCommInitRank or earlier), so a rank hung in NCCL's init still
reports on SIGUSR1 rather than dying of it; with SIEVE_DUMP_SIGNAL=off the signal
keeps its default action. Usage: dump_signal_check.py LIBRARY  (runs itself as the child: --child)"""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time


def child(library, first_call):
    threads = len(os.listdir("/proc/self/task"))
    print("threads at load: %d" % threads, flush=True)
    if first_call:
        ctypes.CDLL(library).ncclGroupStart()  # no libnccl here: it fails cleanly, but it is a call
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.5)  # the report is written by the helper thread
    print("alive", flush=True)


def run(library, setting, first_call):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")}
    env.update(LD_PRELOAD=library, SIEVE_DUMP_SIGNAL=setting, SIEVE_LOG_LEVEL="info")
    command = [sys.executable, __file__, library, "--child"] + (["--first-call"] if first_call else [])
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def main():
    library = sys.argv[1]
    if len(sys.argv) > 2:
        child(library, "--first-call" in sys.argv)
        return 0
    failures = []
    on = run(library, "usr1", True)
    if on.returncode != 0 or "alive" not in on.stdout:
        failures.append("SIGUSR1 after the first NCCL call killed the process (rc %d): %s" % (on.returncode, on.stderr))
    elif "collective proxy state (SIEVE_DUMP_SIGNAL)" not in on.stderr:
        failures.append("no report on SIGUSR1 after the first NCCL call: %r" % on.stderr)
    if "threads at load: 1\n" not in on.stdout:
        failures.append("the library started threads at load: %r" % on.stdout)
    before = run(library, "usr1", False)
    if before.returncode not in (-signal.SIGUSR1, 128 + signal.SIGUSR1):
        failures.append("before any NCCL call SIGUSR1 should keep its default action (rc %d): %s"
                        % (before.returncode, before.stderr))
    off = run(library, "off", True)
    if off.returncode not in (-signal.SIGUSR1, 128 + signal.SIGUSR1):
        failures.append("with SIEVE_DUMP_SIGNAL=off the signal keeps its default action (rc %d)" % off.returncode)
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        env = dict(os.environ, LD_PRELOAD=library)
        changed = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "true"], env=env,
                                 capture_output=True, text=True, timeout=60)
        if changed.returncode != 0:
            failures.append("preloaded into setpriv --clear-groups: rc %d: %s" % (changed.returncode, changed.stderr))
    else:
        print("note: not root or no setpriv: the credential change is not checked")
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print("ok: nothing started at load, reports after the first NCCL call, default action otherwise")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
