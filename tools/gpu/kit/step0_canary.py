# SPDX-License-Identifier: Apache-2.0
"""Step 0, the NCCL canary: before any NCCL step, 2 ranks all-reduce 1 MiB once through NCCL's own
Socket transport and once through the Sieve net plugin (sieve-allreduce-perf, NCCL_DEBUG=INFO), the
whole within 45 s. The scheduler reads its verdict (data["verdict"]):
    "both"         every NCCL step runs
    "socket-only"  the Sieve half failed: the NCCL steps run their Socket halves only
    "none"         the Socket half failed: NCCL itself does not work here, every NCCL step is skipped
                   with the first NCCL warning as the reason
Socket first: when it fails, the Sieve half (which needs all of NCCL that Socket needs) is not run."""

import os

from common import NCCL_LOOPBACK_ENV, Step, first_nccl_warning, json_lines, run_ranks, statuses_text

BYTES = 1 << 20
SOCKET_SHARE = 0.55  # of the canary's time: the Socket half's cap, the Sieve half gets the rest


def last_line(path):
    try:
        with open(path, errors="replace") as log:
            lines = [line.strip() for line in log if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def half(step, net, limit):
    """One all-reduce of 1 MiB through `net`; returns (ok, why it failed or "")."""
    tag = "canary-" + net.lower()
    id_file = step.path(tag + ".id")
    if os.path.exists(id_file):
        os.unlink(id_file)

    def env_of_rank(r):
        env = dict(NCCL_LOOPBACK_ENV, NCCL_HOSTID="sieve-kit-%s-%d" % (tag, r), NCCL_NET=net, NCCL_DEBUG="INFO",
                   NCCL_DEBUG_SUBSYS="INIT,NET,ENV")
        env["NCCL_NET_PLUGIN"] = step.library if net == "Sieve" else None
        return env

    statuses = run_ranks(lambda r: [step.bin("sieve-allreduce-perf"), "--rank", str(r), "--nranks", "2", "--id-file",
                                    id_file, "--min-bytes", "1M", "--max-bytes", "1M"],
                         2, env_of_rank, limit, step.path(tag))
    logs = [step.path("%s-%d.log" % (tag, r)) for r in range(2)]
    rows = [r for r in json_lines(logs[0]) if r.get("bytes") == BYTES]
    ok = all(s == 0 for s in statuses) and bool(rows) and all(r.get("correct") for r in rows)
    step.data[net] = {"statuses": statuses, "rows": rows}
    if ok:
        step.check("%s: 2 ranks all-reduced 1 MiB" % net, True, statuses_text(statuses))
        return True, ""
    warning = first_nccl_warning(logs)
    if warning:
        why = "NCCL WARN " + warning
    elif None in statuses:
        why = "no answer within %.0f s (NCCL hangs; no NCCL warning)" % limit
    else:
        why = "%s: %s" % (statuses_text(statuses), last_line(logs[0]) or last_line(logs[1]) or "no output")
    step.data[net]["why"] = why
    step.check("%s: 2 ranks all-reduced 1 MiB" % net, False, why)
    return False, why


def main():
    step = Step(__doc__)
    socket_ok, socket_why = half(step, "Socket", max(5.0, (step.left() - 2) * SOCKET_SHARE))
    if not socket_ok:
        step.data["verdict"] = "none"
        step.data["reason"] = "the NCCL canary failed through NCCL's Socket transport: " + socket_why
        step.could_not_run("Sieve", "NCCL's Socket transport failed first")
    else:
        sieve_ok, sieve_why = half(step, "Sieve", max(5.0, step.left() - 2))
        step.data["verdict"] = "both" if sieve_ok else "socket-only"
        step.data["reason"] = "" if sieve_ok else "the NCCL canary failed through the Sieve net plugin: " + sieve_why
    step.save()
    step.finish()


if __name__ == "__main__":
    main()
