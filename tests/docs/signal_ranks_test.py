# SPDX-License-Identifier: Apache-2.0
"""docs/DEPLOY.md's signal_sieve_ranks, as the document writes it, against three processes whose
command lines match its pattern: a rank (Sieve mapped, SIGUSR1 caught: Python's handler stands in for
Sieve's) gets the signal; a launcher with Sieve preloaded but no handler, and a process without Sieve
(a rank of a job rolled back), are left alone. SIGUSR1 would kill either. Then each survivor is
ended with SIGTERM: had it been sent SIGUSR1 first, that signal would have ended it.

Run: python3 signal_ranks_test.py SOURCE_DIR LIBRARY"""

import os
import re
import signal
import subprocess
import sys
import tempfile


def function_text(source):
    text = open(os.path.join(source, "docs", "DEPLOY.md")).read()
    found = re.search(r"^signal_sieve_ranks\(\) \{.*?^\}$", text, re.MULTILINE | re.DOTALL)
    if not found:
        sys.exit("FAIL: docs/DEPLOY.md has no signal_sieve_ranks() { ... } block")
    return found.group(0)


def start(code, marker):
    process = subprocess.Popen([sys.executable, "-c", code, marker], stdout=subprocess.PIPE, text=True)
    if process.stdout.readline().strip() != "ready":
        sys.exit("FAIL: a process of the test did not start")
    return process


def main():
    source, library = sys.argv[1], os.path.abspath(sys.argv[2])
    marker = "sieve-signal-test-%d-train.py" % os.getpid()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        got = os.path.join(tmp, "rank-got-it")
        sleep = "print('ready', flush=True); time.sleep(120)"
        rank = start("import ctypes, signal, sys, time; ctypes.CDLL(%r)\n"
                     "signal.signal(signal.SIGUSR1, lambda *a: (open(%r, 'w').close(), sys.exit(0)))\n%s"
                     % (library, got, sleep), marker)
        launcher = start("import ctypes, time; ctypes.CDLL(%r); %s" % (library, sleep), marker)
        plain = start("import time; %s" % sleep, marker)
        done = subprocess.run(["bash", "-c", function_text(source) + '\nsignal_sieve_ranks "$1"', "bash", marker],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            failures.append("the function failed: %d %s" % (done.returncode, done.stderr))
        if rank.wait(timeout=60) != 0 or not os.path.exists(got):
            failures.append("the rank did not get SIGUSR1 (exit %s)" % rank.returncode)
        for name, process in (("the launcher", launcher), ("the process without Sieve", plain)):
            process.send_signal(signal.SIGTERM)
            if process.wait(timeout=60) != -signal.SIGTERM:
                failures.append("%s was signalled: it ended with %s" % (name, process.returncode))
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print("signal_sieve_ranks signals the rank alone")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
