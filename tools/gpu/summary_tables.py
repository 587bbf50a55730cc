# SPDX-License-Identifier: Apache-2.0
"""Turns a GPU kit run's summary.json (tools/gpu/run.sh) into the README's "Measured on a GPU"
section: the machine in one paragraph, one line per step, then a table per step that measured
something. Markdown on stdout.

    python3 tools/gpu/summary_tables.py summary.json > measured.md
"""

import json
import sys


def fmt(value, spec="%.2f", missing="-"):
    return missing if value is None else spec % value


def mib(size):
    return "%d GiB" % (size >> 30) if size >= 1 << 30 else "%d MiB" % (size >> 20)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_paragraph(summary):
    m, kit = summary.get("machine", {}), summary.get("kit", {})
    driver, torch, host = m.get("driver", {}), m.get("torch", {}), m.get("host", {})
    gpus = ", ".join("%s (compute capability %s, %d GiB)" % (d["name"], d["compute_capability"],
                                                             d["memory_MiB"] // 1024)
                     for d in driver.get("devices", [])) or "no GPU"
    smi_gpus = m.get("nvidia_smi", {}).get("gpus", [])
    parts = [
        "%s; driver %s (CUDA %s)" % (gpus, smi_gpus[0]["driver"] if smi_gpus else "?",
                                     driver.get("driver_cuda") or "?"),
        "NCCL %s" % (m.get("nccl", {}).get("version") or "not found"),
        "PyTorch %s" % torch.get("version", "not found"),
        "%s CPUs, %s GiB" % (host.get("cpus", "?"), host.get("memory_GiB", "?")),
    ]
    text = "Machine: " + "; ".join(parts) + ". Kit: commit %s%s, CUDA %s." % (
        (kit.get("commit") or "?")[:12], " (modified)" if kit.get("modified") else "", kit.get("cuda_toolkit", "?"))
    if summary.get("note"):
        text += "\n\n> " + summary["note"]
    return text


def overview(summary):
    rows = []
    for s in summary.get("steps", []):
        reason = s.get("reason", "")
        if len(reason) > 160:  # the whole reason is in summary.json and the step's log
            reason = reason[:157] + "..."
        result = s["status"] + (": " + reason if reason else "")
        targets = s.get("targets", [])
        met = "%d of %d" % (sum(t["met"] for t in targets), len(targets)) if targets else "-"
        rows.append((s["step"], s["title"], result, met, "%.0f s of %d" % (s.get("seconds", 0), s.get("budget_s", 0))))
    return table(["step", "what", "result", "targets met", "time"], rows)


def step_kernels(data):
    rows = []
    for label in ("kernel tests", "kernel tests under memcheck", "kernel tests under racecheck"):
        if label in data:
            t = data[label]
            rows.append((label, "%d passed, %d failed, %d skipped" % (t["passed"], len(t["failed"]),
                                                                      len(t["skipped"]))))
    for tool in ("memcheck", "racecheck"):
        if tool in data:
            rows.append((tool, "%s errors" % fmt(data[tool].get("errors"), "%d", "?")))
    return table(["check", "result"], rows) if rows else ""


def step_bandwidth(data):
    rows = [(r["dtype"], r["mask"], "%.2f" % r["density"], "%.0f" % r["copy_GBps"], "%.2f" % r["gather_vs_copy"],
             "%.2f" % r["gather_touched_vs_copy"], "%.2f" % r["scatter_vs_zero_and_copy"])
            for r in data.get("rows", [])]
    return table(["dtype", "mask", "density", "copy GB/s", "gather / copy", "gather drawn / copy",
                  "scatter / (zero + copy)"], rows) if rows else ""


def step_tests(data):
    rows = [(label, "%d passed, %d failed%s" % (t["passed"], len(t["failed"]),
                                                ": " + ", ".join(t["failed"]) if t["failed"] else ""))
            for label, t in data.items() if isinstance(t, dict) and "passed" in t]
    return table(["tests", "result"], rows) if rows else ""


def step_allreduce(data):
    rows = data.get("rows", [])
    ranks = sorted({r["nranks"] for r in rows})
    sizes = sorted({r["bytes"] for r in rows})
    found = {(r["nranks"], r["transport"], r["bytes"]): r["busbw_GBps"] for r in rows}
    header = ["size"]
    for n in ranks:
        header += ["Sieve, %d ranks" % n, "Socket, %d ranks" % n, "Sieve / Socket"]
    body = []
    for size in sizes:
        row = [mib(size)]
        for n in ranks:
            sieve, socket = found.get((n, "Sieve", size)), found.get((n, "Socket", size))
            row += [fmt(sieve), fmt(socket), fmt(sieve / socket if sieve and socket else None, "%.2fx")]
        body.append(row)
    return ("Bus bandwidth, GB/s (nccl-tests' definition), f32 sum, one GPU, each rank its own NCCL host over "
            "loopback.\n\n" + table(header, body)) if body else ""


def step_ddp(data):
    variants = data.get("variants", {})
    rows = []
    for name in ("dense", "published", "learned", "observe"):
        v = variants.get(name)
        if not v:
            continue
        same = "-" if name == "dense" else ("bit-identical" if v.get("bit_identical") else
                                            "differs from step %s (max %.3g)" % (v.get("first_different_step"),
                                                                                 v.get("max_abs_difference", 0)))
        rows.append((name, "%.6f" % v["final_loss"], same, "/".join(str(c) for c in v["collectives_compacted"]),
                     fmt(v.get("wire_ratio"), "%.3f") if name != "dense" else "1", "%.1f" % v["step_ms"],
                     fmt(v.get("time_ratio"), "%.2f") if name != "dense" else "1"))
    return ("%s steps, 2 ranks on one GPU, all traffic through %s.\n\n"
            % (data.get("steps", "?"), data.get("net", "the Sieve net plugin"))
            + table(["masks", "final loss", "losses vs dense", "compacted (rank 0/1)", "wire bytes vs dense",
                     "ms per step", "time vs dense"], rows)) if rows else ""


def step_fsdp(data):
    rows = []
    for config, c in data.get("configs", {}).items():
        dense, sieve = c.get("dense", {}), c.get("sieve", {})
        if not dense and not sieve:
            continue
        same = "-" if "bit_identical" not in c else ("bit-identical" if c["bit_identical"] else
                                                     "differs from step %s" % c.get("first_different_step"))
        rows.append((config, fmt(dense.get("final_loss"), "%.6f"), fmt(sieve.get("final_loss"), "%.6f"), same,
                     "/".join(str(x) for x in sieve.get("collectives_compacted", [])) or "-",
                     fmt(dense.get("step_ms"), "%.1f"), fmt(sieve.get("step_ms"), "%.1f"), c.get("note") or ""))
    return ("%s steps, 2 ranks on one GPU.\n\n" % data.get("steps", "?")
            + table(["reduce", "final loss, dense", "final loss, Sieve", "losses", "compacted (rank 0/1)",
                     "ms per step, dense", "ms per step, Sieve", "note"], rows)) if rows else ""


def step_canary(data):
    rows = []
    for net in ("Socket", "Sieve"):
        half = data.get(net)
        if half is None:
            continue
        row = next((r for r in half.get("rows", []) if r.get("busbw_GBps") is not None), None)
        rows.append((net, "ok" if not half.get("why") else half["why"], fmt(row and row["busbw_GBps"])))
    verdict = {"both": "every NCCL step runs", "socket-only": "the NCCL steps run their Socket halves only",
               "none": "every NCCL step is skipped"}.get(data.get("verdict"), "")
    return (table(["transport", "2 ranks, 1 MiB", "bus GB/s"], rows) + ("\n\nVerdict: %s." % verdict if verdict else "")
            ) if rows else ""


RENDERERS = {"canary": step_canary, "sanitizers": step_kernels, "kernels": step_kernels, "bandwidth": step_bandwidth,
             "multiprocess": step_tests, "allreduce": step_allreduce, "ddp": step_ddp, "fsdp": step_fsdp}


def render(summary):
    parts = ["## Measured on a GPU", machine_paragraph(summary)]
    verdict = summary.get("machine", {}).get("verdict", {})
    if not summary.get("steps"):
        parts.append("No step ran: %s." % verdict.get("line", summary.get("status", "?")))
        return "\n\n".join(parts) + "\n"
    parts.append(overview(summary))
    for s in summary["steps"]:
        body = RENDERERS.get(s["name"], lambda _: "")(s.get("data", {}))
        if body:
            parts.append("### %d. %s\n\n%s" % (s["step"], s["title"][0].upper() + s["title"][1:], body))
    return "\n\n".join(parts) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summary_tables.py summary.json")
    with open(sys.argv[1]) as f:
        summary = json.load(f)
    sys.stdout.write(render(summary))


if __name__ == "__main__":
    main()
