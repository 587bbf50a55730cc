# SPDX-License-Identifier: Apache-2.0
"""The launcher the FSDP2 tests share: this script runs itself once per rank (argv: rank, world,
port), on loopback with Gloo, and the parent waits for every rank within a bound. The rendezvous is a
TCPStore the parent serves on a port the kernel picks (no port chosen by one process and bound by
another, which a third could take in between); ranks join it with init_gloo."""

import contextlib
import datetime
import logging
import os
import subprocess
import sys
import time
import traceback


def init_gloo(rank, world, port, seconds=120):
    """A rank's default process group: Gloo, through the parent's store on `port`."""
    import torch.distributed as dist
    timeout = datetime.timedelta(seconds=seconds)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)


def end_rank(code):
    """Ends a rank now, without the interpreter's finalization. A Gloo worker thread may drop its
    last reference to a finished collective's tensors after the main thread began finalizing; the
    GIL it then needs ends the thread inside a noexcept destructor, and the rank aborts ("terminate
    called without an active exception") after every check passed. Seen once in CI; the core showed
    c10d::ProcessGroupGloo::runLoop in ~AsyncAllgatherCoalescedWork -> gil_scoped_acquire ->
    pthread_exit beside Py_FinalizeEx. Nothing of Sieve runs there."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_ranks(script, worker, world, timeout, ok_message):
    """As a rank (arguments given): runs worker(rank, world, port). As the parent: starts `world`
    ranks of `script`, kills them all if one is not done within `timeout` seconds; 0 when all exit 0."""
    if len(sys.argv) > 1:
        try:
            worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
        except BaseException:
            traceback.print_exc()
            end_rank(1)
        end_rank(0)
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    port = store.port  # served until this function returns, after every rank has exited
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, script, str(r), str(world), str(port)], env=env)
             for r in range(world)]
    codes = []
    deadline = time.monotonic() + timeout  # one deadline for all ranks, not `timeout` per rank
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.0, deadline - time.monotonic())))
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


@contextlib.contextmanager
def sieve_log():
    """The messages Sieve logs (the "sieve" logger) inside the block, as a list that fills."""
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Keep(logging.DEBUG)
    logger = logging.getLogger("sieve")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
