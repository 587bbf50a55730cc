# SPDX-License-Identifier: Apache-2.0
"""The launcher the FSDP2 tests share: this script runs itself once per rank (argv: rank, world,
port), on loopback with Gloo, and the parent waits for every rank within a bound."""

import os
import socket
import subprocess
import sys


def run_ranks(script, worker, world, timeout, ok_message):
    """As a rank (arguments given): runs worker(rank, world, port). As the parent: starts `world`
    ranks of `script`, kills them all if one is not done within `timeout` seconds; 0 when all exit 0."""
    if len(sys.argv) > 1:
        worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, script, str(r), str(world), str(port)], env=env)
             for r in range(world)]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("FAIL: a rank did not finish in %d s" % timeout)
            return 1
    if any(codes):
        print("FAIL: rank exit codes %s" % codes)
        return 1
    print(ok_message)
    return 0
