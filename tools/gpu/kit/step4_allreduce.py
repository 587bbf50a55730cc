# SPDX-License-Identifier: Apache-2.0
"""Step 4: real NCCL all-reduce through the Sieve net plugin against NCCL's own socket transport
(NCCL_NET=Sieve vs NCCL_NET=Socket), 2 and 4 ranks on one GPU (each its own NCCL "host", loopback),
1 MiB to 1 GiB of f32 (256 MiB in the quick profile): bus bandwidth as nccl-tests computes it, every
result checked. Target (docs/DESIGN.md): the plugin moves at least what NCCL's socket transport moves.
When the canary found the Sieve net plugin failing, only the Socket runs are made. Rows are saved
after each run."""

import os
import re

from common import NCCL_LOOPBACK_ENV, SIEVE_NET_USABLE, Step, json_lines, run_ranks, statuses_text

RUNS = [(2, "Sieve"), (2, "Socket"), (4, "Sieve"), (4, "Socket")]
MAX_BYTES = {"full": ("1G", 6), "quick": ("256M", 5)}  # --max-bytes, and the sizes from 1 MiB (x4) up to it
# Of each run's share, what NCCL's set-up and teardown take (the rest is the measuring's --time-limit),
# and the least measuring time worth starting a run with.
SETUP_S = {"full": 30, "quick": 8}
LEAST_S = {"full": 20, "quick": 8}
TARGET_FROM_BYTES = 64 << 20  # below this, per-call latency rather than the transport decides


def used_network(log_path):
    with open(log_path, errors="replace") as log:
        found = re.findall(r"Using network (\S+)", log.read())
    return found[0] if found else None


def main():
    step = Step(__doc__)
    max_bytes, sizes = MAX_BYTES[step.args.profile]
    runs = [(n, net) for n, net in RUNS if SIEVE_NET_USABLE or net == "Socket"]
    if not SIEVE_NET_USABLE:
        step.could_not_run("the Sieve runs", "the NCCL canary found the Sieve net plugin failing (step 0)")
    rows = []
    step.data["rows"] = rows
    for index, (nranks, net) in enumerate(runs):
        label = "%s, %d ranks" % (net, nranks)
        runs_left = len(runs) - index
        setup = SETUP_S[step.args.profile]
        limit = step.left() / runs_left - setup
        if limit < LEAST_S[step.args.profile]:
            step.could_not_run(label, "no time left (%.0f s)" % step.left())
            continue
        tag = "%s-%d" % (net.lower(), nranks)
        id_file = step.path(tag + ".id")
        if os.path.exists(id_file):
            os.unlink(id_file)

        def env_of_rank(r):
            env = dict(NCCL_LOOPBACK_ENV, NCCL_HOSTID="sieve-kit-%s-%d" % (tag, r), NCCL_NET=net,
                       NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET,ENV")
            # Socket: no plugin named, so NCCL loads none (the kit has no libnccl-net.so).
            env["NCCL_NET_PLUGIN"] = step.library if net == "Sieve" else None
            return env

        statuses = run_ranks(
            lambda r: [step.bin("sieve-allreduce-perf"), "--rank", str(r), "--nranks", str(nranks), "--id-file",
                       id_file, "--min-bytes", "1M", "--max-bytes", max_bytes, "--factor", "4", "--time-limit",
                       "%.0f" % limit],
            nranks, env_of_rank, limit + setup, step.path(tag))
        log0 = step.path(tag + "-0.log")
        measured = [dict(r, transport=net) for r in json_lines(log0) if "busbw_GBps" in r]
        rows += measured
        step.save()
        step.check(label + ": every rank exited cleanly", all(s == 0 for s in statuses), statuses_text(statuses))
        network = used_network(log0)
        step.check(label + ": NCCL used the %s transport" % net, network in (None, net),
                   "NCCL said 'Using network %s'" % network if network else
                   "NCCL printed no 'Using network' line; NCCL_NET=%s allows no other" % net)
        step.check(label + ": every sum exact", measured and all(r["correct"] for r in measured),
                   "%d sizes measured" % len(measured))
        if 0 < len(measured) < sizes:
            step.could_not_run(label + ": sizes above %d MiB" % (measured[-1]["bytes"] >> 20), "time limit")

    for nranks in sorted({n for n, _ in RUNS}):
        sieve = {r["bytes"]: r for r in rows if r["nranks"] == nranks and r["transport"] == "Sieve"}
        socket = {r["bytes"]: r for r in rows if r["nranks"] == nranks and r["transport"] == "Socket"}
        for size in sorted(set(sieve) & set(socket)):
            if size < TARGET_FROM_BYTES:
                continue
            ratio = sieve[size]["busbw_GBps"] / socket[size]["busbw_GBps"] if socket[size]["busbw_GBps"] else 0.0
            step.target("%d ranks, %d MiB: Sieve >= NCCL Socket" % (nranks, size >> 20), ratio >= 1.0,
                        "%.2fx (%.2f vs %.2f GB/s bus)" % (ratio, sieve[size]["busbw_GBps"],
                                                           socket[size]["busbw_GBps"]))
    step.finish()


if __name__ == "__main__":
    main()
