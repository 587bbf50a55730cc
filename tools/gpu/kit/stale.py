# SPDX-License-Identifier: Apache-2.0
"""Ends what an earlier run of this kit left running: a device call cut short at its limit ends
run.sh, but the steps run in sessions of their own, so their ranks may still hold the GPU (and its
memory) when the next call starts. Every process the kit starts inherits SIEVE_GPU_KIT_DIR (the kit's
path) and SIEVE_GPU_KIT_RUN (its run's id); one with this kit's path and another run's id is stale.

    stale.py KIT_DIR RUN_ID
Prints what it ended; exit 0.
"""

import os
import signal
import sys
import time


def kit_processes(kit, run):
    """[(pid, command line)] of processes of this kit's earlier runs (/proc/PID/environ)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                environ = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone, or not ours to read
            continue
        if environ.get(b"SIEVE_GPU_KIT_DIR") == kit.encode() and environ.get(b"SIEVE_GPU_KIT_RUN") != run.encode():
            found.append((int(entry), command))
    return found


def alive(pid):
    """Running, not a zombie (ended, waiting to be reaped: it still shows in /proc)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return "\nState:\tZ" not in f.read()
    except OSError:
        return False


def main():
    kit, run = os.path.realpath(sys.argv[1]), sys.argv[2]
    stale = kit_processes(kit, run)
    if not stale:
        return 0
    for pid, command in stale:
        print("ending a process left by an earlier run of this kit: %d %s" % (pid, command[:200]), flush=True)
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 1.0)):
        for pid, _ in stale:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.time() + wait
        while time.time() < end and any(alive(pid) for pid, _ in stale):
            time.sleep(0.1)
    left = [pid for pid, _ in stale if alive(pid)]
    print("ended %d stale process(es)%s" % (len(stale) - len(left), "; still running: %s" % left if left else ""),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
