#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Real DDP training on Gloo, one process per node: the ranks sieve-bench --train ddp starts.

Each node runs in its own network namespace (by hand: tools/share/netlab.sh exec I python3
tools/share/ddp_train.py --rank I ...). The job: torchvision's ResNet-18 (10 classes), pruned with
torch.nn.utils.prune (L1, every convolution and linear weight, to --density), SGD with momentum, on
synthetic images (a fixed handful of batches per rank, so the loss visibly falls), fixed seeds. The
same job runs once per mode, the modes one after the other in the same processes, each from the
same initial model:

  default        DDP's default hook (allreduce_hook: identical to registering none)
  sieve          sieve.ddp.compact_hook: each bucket's kept elements only, exact
  sieve-bf16     sieve.ddp.compact_hook with a bf16 wire (lossy)
  bf16-compress  PyTorch's bf16_compress_hook (dense, bf16 wire, lossy)
  powersgd       PyTorch's PowerSGD hook, rank 4 (lossy; plain all-reduce in step 1)
  default-alt    DDP's default hook under another bucket size (--alt-bucket-mb): the reduction-order
                 noise of the default itself

Per mode and step: every rank's loss, this node's kernel tx bytes on --ifname (read between steps,
so the barriers that line the ranks up are not counted), the step's seconds (the slowest rank's) and
its communication seconds: the time during which at least one bucket was in flight, a bucket
counting from the moment the last rank called its hook to the moment the last rank's hook future
completed (compaction and expansion included; comm_seconds()). That one figure is split two ways:
the all-reduce alone (allreduce_seconds(): each all-reduce a hook issues counts from the moment the
last rank issued it, after compaction in Sieve's modes, to the moment the last rank's all-reduce
future completed, the union as above) and the hook's own work around its all-reduce
(compaction_seconds(): for Sieve's modes the gather before and the scatter after; for the others
what they do there, e.g. the default's division; none where a hook issues all-reduces from
callbacks, as PowerSGD does).

DDP runs with broadcast_buffers=False: the masks of torch.nn.utils.prune are module buffers, and DDP
would otherwise broadcast them all from rank 0 before every forward (measured: 22 MB per node per
step at 2 nodes, more than Sieve's whole gradient exchange).

Rank 0 prints one JSON object (--json) or a table. --probe only checks the imports and exits.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import threading
import time

MODES = ("default", "sieve", "sieve-bf16", "bf16-compress", "powersgd", "default-alt")


def tx_bytes(ifname):
    """This namespace's kernel tx byte counter of ifname."""
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == ifname:
                return int(rest.split()[8])
    return None


def import_sieve_ddp():
    """The hook from this source tree's tools/python when the script runs from a source tree (its
    sieve may be newer than an installed one), else from the installed package."""
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    if os.path.isfile(os.path.join(source, "sieve", "ddp.py")) and source not in sys.path:
        sys.path.insert(0, source)
    from sieve import ddp
    return ddp


def probe():
    """Exit 0 when this interpreter can run the job; else one JSON line saying why, exit 4."""
    try:
        import torch
        import torch.distributed as dist
        import torchvision  # noqa: F401
        import_sieve_ddp()
    except ImportError as e:
        print(json.dumps({"error": "%s cannot run the DDP job (%s): it needs PyTorch 2.x, torchvision and Sieve's "
                                   "Python package" % (sys.executable, e)}), flush=True)
        return 4
    if not dist.is_gloo_available():
        print(json.dumps({"error": "torch %s has no Gloo backend" % torch.__version__}), flush=True)
        return 4
    return 0


class Timer:
    """Wraps a comm hook (self.hook, a function as DDP checks hooks): records each bucket's index,
    the hook's call and its future's completion, and (while installed) every all-reduce this process
    issues: the bucket whose hook issued it from the hook's own thread (None when issued elsewhere,
    e.g. from a future's callback), its issue and its completion (time.monotonic: one clock for every
    process of the machine, so the ranks' records can be lined up)."""

    def __init__(self, inner):
        self.spans = []
        self.reduces = []
        spans, reduces = self.spans, self.reduces
        inside = threading.local()

        def timed_hook(state, bucket):
            start, index = time.monotonic(), bucket.index()

            def done(fut):
                spans.append((index, start, time.monotonic()))
                return fut.value()

            inside.bucket = index
            try:
                return inner(state, bucket).then(done)
            finally:
                inside.bucket = None

        def timed_all_reduce(real):
            def all_reduce(*args, **kwargs):
                record = [getattr(inside, "bucket", None), time.monotonic(), None]
                work = real(*args, **kwargs)
                reduces.append(record)  # in issue order: every rank issues the same collectives in the same order
                if work is None:  # synchronous: done on return
                    record[2] = time.monotonic()
                else:  # registered before the hook's own callbacks, so it runs first, before any expansion
                    work.get_future().add_done_callback(lambda _: record.__setitem__(2, time.monotonic()))
                return work

            return all_reduce

        self.hook = timed_hook
        self._wrap = timed_all_reduce

    def __enter__(self):
        """Times torch.distributed.all_reduce (what every hook here calls, by module attribute)."""
        import torch.distributed as dist
        self._real = dist.all_reduce
        dist.all_reduce = self._wrap(self._real)
        return self

    def __exit__(self, *_):
        import torch.distributed as dist
        dist.all_reduce = self._real

    def take(self):
        """This step's records (bucket spans, all-reduce records); clears them."""
        taken = (sorted(self.spans), [tuple(r) for r in self.reduces])
        del self.spans[:]
        del self.reduces[:]
        return taken


def union_seconds(intervals):
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total, reach = total + (b - a), b
        elif b > reach:
            total, reach = total + (b - reach), b
    return total


def comm_seconds(records):
    """A step's communication time from every rank's records: each bucket counts from the moment the
    last rank handed it to its hook (no collective can start earlier) to the moment the last rank had
    it back, so a rank's compute running late is not counted as communication; the union of the
    buckets' intervals."""
    by_bucket = {}
    for rank_records in records:
        for index, start, end in rank_records:
            s, e = by_bucket.get(index, (start, end))
            by_bucket[index] = (max(s, start), max(e, end))
    return union_seconds(by_bucket.values())


def allreduce_seconds(reduces):
    """A step's all-reduce time alone from every rank's all-reduce records: the k-th all-reduce of
    the step (the same collective on every rank) counts from the moment the last rank issued it to
    the moment the last rank's future completed; the union of those intervals."""
    spans = [(max(r[k][1] for r in reduces), max(r[k][2] for r in reduces))
             for k in range(min(len(r) for r in reduces))]
    return union_seconds(spans)


def compaction_seconds(records, reduces):
    """A step's hook work outside its all-reduces on the slowest rank: per bucket, its hook's span less
    the all-reduces its hook issued (for Sieve: the gather before and the scatter after), summed over
    the buckets. None when an all-reduce was issued outside a hook call (PowerSGD's from a callback):
    then no all-reduce can be told to its bucket."""
    per_rank = []
    for spans, rank_reduces in zip(records, reduces):
        if any(bucket is None for bucket, _, _ in rank_reduces):
            return None
        per_rank.append(sum(end - start - union_seconds([(a, b) for bucket, a, b in rank_reduces if bucket == index])
                            for index, start, end in spans))
    return max(per_rank) if per_rank else None


def in_bucket_order(inner):
    """PowerSGD issues its second all-reduce from the first one's completion callback, on Gloo's
    thread: with several buckets those callbacks race the next bucket's hook, the ranks issue their
    collectives in different orders, and Gloo aborts on the mismatch. Here each bucket waits for the
    previous bucket's whole exchange first (they would queue on the same links anyway)."""
    last = [None]

    def ordered_hook(state, bucket):
        if last[0] is not None and bucket.index() != 0:
            last[0].wait()
        last[0] = inner(state, bucket)
        return last[0]

    return ordered_hook


def latency_seconds(torch, dist, count=21):
    """The link's per-collective latency as this job's all-reduces see it: the median time of a
    one-element all-reduce (after a barrier each), on every rank; the slowest rank's."""
    times = []
    one = torch.zeros(1)
    for _ in range(count):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(one)
        times.append(time.perf_counter() - start)
    mine = torch.tensor([median(times)], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine[0])


def build_model(torch, torchvision, prune, density):
    torch.manual_seed(1)
    model = torchvision.models.resnet18(num_classes=10)
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            prune.l1_unstructured(module, "weight", amount=1.0 - density)
    return model


def kept_fraction(model):
    """Of the gradient elements DDP reduces: those a mask keeps (unpruned parameters count whole)."""
    buffers = dict(model.named_buffers())
    kept = total = 0
    for name, param in model.named_parameters():
        total += param.numel()
        mask = buffers.get(name[:-len("_orig")] + "_mask") if name.endswith("_orig") else None
        kept += int(mask.ne(0).sum()) if mask is not None else param.numel()
    return kept / total, total


def run_mode(args, mode, torch, dist, torchvision, prune):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    sieve_ddp = import_sieve_ddp()
    model = build_model(torch, torchvision, prune, args.density)
    bucket_mb = args.alt_bucket_mb if mode == "default-alt" else args.bucket_mb
    # torch.nn.utils.prune keeps each mask as a module buffer: with broadcast_buffers=True DDP would
    # broadcast every mask (a dense model's worth of bytes) from rank 0 before every forward.
    ddp = DDP(model, bucket_cap_mb=bucket_mb, broadcast_buffers=False)
    if mode in ("default", "default-alt"):
        state, hook = None, default_hooks.allreduce_hook
    elif mode in ("sieve", "sieve-bf16"):
        state = sieve_ddp.CompactState(ddp, wire_dtype=torch.bfloat16 if mode == "sieve-bf16" else None)
        hook = sieve_ddp.compact_hook
    elif mode == "bf16-compress":
        state, hook = None, default_hooks.bf16_compress_hook
    else:
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=2,
                                            random_seed=0)
        hook = in_bucket_order(powerSGD_hook.powerSGD_hook)
    timer = Timer(hook)
    ddp.register_comm_hook(state, timer.hook)
    with timer:
        result = train(args, torch, dist, ddp, timer)
    if state is not None and hasattr(state, "stats"):
        result["hook_stats"] = dict(state.stats)
    return result


def train(args, torch, dist, ddp, timer):
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    generator = torch.Generator().manual_seed(1000 + args.rank)
    data = [(torch.randn(args.batch, 3, args.image, args.image, generator=generator),
             torch.randint(0, 10, (args.batch,), generator=generator)) for _ in range(args.batches)]
    losses, seconds, comm, reduces, tx = [], [], [], [], []
    for step in range(args.steps):
        x, y = data[step % len(data)]
        dist.barrier()
        before = tx_bytes(args.ifname)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        after = tx_bytes(args.ifname)
        spans, step_reduces = timer.take()
        comm.append(spans)
        reduces.append(step_reduces)
        tx.append(after - before if before is not None and after is not None else -1)
        losses.append(loss.item())
    return {"losses": losses, "seconds": seconds, "comm_spans": comm, "allreduce_spans": reduces, "tx_bytes": tx}


def median(values):
    values = sorted(values)
    n = len(values)
    return (values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2) if n else 0.0


def summarise(args, per_rank, kept, elements, torch_version, latency=0.0):
    """Rank 0's report from every rank's results."""
    world = len(per_rank)
    steady = slice(min(2, args.steps - 1), None)  # after DDP's bucket rebuild and PowerSGD's start
    modes = []
    default = per_rank[0].get("default")
    for mode in args.modes:
        ranks = [r[mode] for r in per_rank]
        entry = {
            "name": mode,
            "bucket_cap_mb": args.alt_bucket_mb if mode == "default-alt" else args.bucket_mb,
            "losses": [r["losses"] for r in ranks],
            "step_seconds": [max(r["seconds"][s] for r in ranks) for s in range(args.steps)],
            "comm_seconds": [comm_seconds([r["comm_spans"][s] for r in ranks]) for s in range(args.steps)],
            "allreduce_seconds": [allreduce_seconds([r["allreduce_spans"][s] for r in ranks])
                                  for s in range(args.steps)],
            "compaction_seconds": [compaction_seconds([r["comm_spans"][s] for r in ranks],
                                                      [r["allreduce_spans"][s] for r in ranks])
                                   for s in range(args.steps)],
            "tx_bytes": [sum(r["tx_bytes"][s] for r in ranks) / world for s in range(args.steps)],
            "allreduces_per_step": [len(ranks[0]["allreduce_spans"][s]) for s in range(args.steps)],
        }
        if "hook_stats" in ranks[0]:
            entry["hook_stats"] = ranks[0]["hook_stats"]
        entry["median_step_seconds"] = median(entry["step_seconds"][steady])
        entry["median_comm_seconds"] = median(entry["comm_seconds"][steady])
        entry["median_allreduce_seconds"] = median(entry["allreduce_seconds"][steady])
        compaction = entry["compaction_seconds"][steady]
        entry["median_compaction_seconds"] = None if None in compaction else median(compaction)
        entry["median_tx_bytes"] = median(entry["tx_bytes"][steady])
        if default is not None:
            ref = [r["default"] for r in per_rank]
            pairs = [(a, b) for r, d in zip(ranks, ref) for a, b in zip(r["losses"], d["losses"])]
            entry["losses_identical_to_default"] = all(a.hex() == b.hex() for a, b in pairs)
            entry["max_loss_difference"] = max(abs(a - b) for a, b in pairs)
        modes.append(entry)
    by_name = {m["name"]: m for m in modes}
    report = {"nodes": world, "model": "resnet18", "density": args.density, "kept_fraction": kept,
              "gradient_elements": elements, "steps": args.steps, "batch": args.batch, "image": args.image,
              "bucket_cap_mb": args.bucket_mb, "torch": torch_version, "backend": "gloo",
              "steady_from_step": steady.start + 1, "latency_seconds": latency, "modes": modes}
    if "default" in by_name:
        d = by_name["default"]
        for m in modes:
            if d["median_tx_bytes"] > 0:
                m["wire_vs_default"] = m["median_tx_bytes"] / d["median_tx_bytes"]
            if d["median_comm_seconds"] > 0:
                m["comm_vs_default"] = m["median_comm_seconds"] / d["median_comm_seconds"]
            if d["median_allreduce_seconds"] > 0:
                m["allreduce_vs_default"] = m["median_allreduce_seconds"] / d["median_allreduce_seconds"]
        if "sieve" in by_name:
            s = by_name["sieve"]
            # "Plus latency": each all-reduce Sieve issues in a step costs the link's latency once,
            # whatever its size, which no compaction can shrink.
            allreduces = median(s["allreduces_per_step"][steady])
            allowance = allreduces * latency / d["median_comm_seconds"] if d["median_comm_seconds"] > 0 else 0.0
            goals = {"wire_at_most": kept + 0.01, "wire": s.get("wire_vs_default"),
                     "comm_at_most": 1.15 * kept, "comm": s.get("comm_vs_default"),
                     "latency_allowance": allowance, "allreduces_per_step": allreduces,
                     "comm_at_most_with_latency": 1.15 * kept + allowance,
                     "allreduce": s.get("allreduce_vs_default"),
                     "compaction_seconds": s.get("median_compaction_seconds"),
                     "losses_identical_to_default": s.get("losses_identical_to_default"),
                     "max_loss_difference": s.get("max_loss_difference")}
            if "default-alt" in by_name:
                goals["default_alt_max_loss_difference"] = by_name["default-alt"].get("max_loss_difference")
            report["goals"] = goals
    return report


def table(report):
    out = ["DDP training, ResNet-18 pruned to density %.2f (%.1f %% of %d gradient elements kept), %d nodes, "
           "Gloo, torch %s" % (report["density"], 100 * report["kept_fraction"], report["gradient_elements"],
                               report["nodes"], report["torch"]),
           "%d steps of batch %d at %dx%d; medians from step %d on%s" % (
               report["steps"], report["batch"], report["image"], report["image"], report["steady_from_step"],
               " (after DDP's bucket rebuild)" if report["steady_from_step"] >= 3 else ""),
           "",
           "%-14s %10s %8s %9s %8s %9s %8s %9s %9s %8s %10s %s" % (
               "mode", "wire MB", "x dflt", "comm s", "x dflt", "allred s", "x dflt", "compact s", "step s", "loss 1",
               "loss last", "vs default")]
    for m in report["modes"]:
        if "losses_identical_to_default" not in m:
            same = ""
        elif m["losses_identical_to_default"]:
            same = "bit-identical"
        else:
            same = "max diff %.3g" % m["max_loss_difference"]
        compaction = m["median_compaction_seconds"]
        out.append("%-14s %10.2f %8.3f %9.3f %8.3f %9.3f %8.3f %9s %9.3f %8.4f %10.4f %s" % (
            m["name"], m["median_tx_bytes"] / 1e6, m.get("wire_vs_default", 0), m["median_comm_seconds"],
            m.get("comm_vs_default", 0), m["median_allreduce_seconds"], m.get("allreduce_vs_default", 0),
            "-" if compaction is None else "%.3f" % compaction, m["median_step_seconds"], m["losses"][0][0],
            m["losses"][0][-1], same))
    g = report.get("goals")
    if g:
        out.append("")
        out.append("sieve: wire %.3f of default (goal <= %.3f), comm %.3f of default (goal <= %.3f plus latency: "
                   "%.3f), losses %s" % (g["wire"] or 0, g["wire_at_most"], g["comm"] or 0, g["comm_at_most"],
                                         g["comm_at_most_with_latency"],
                                         "bit-identical to default" if g["losses_identical_to_default"]
                                         else "differ by at most %.3g" % g["max_loss_difference"]))
        out.append("sieve: latency %.2f ms per all-reduce (a one-element all-reduce's median) x %g all-reduces per "
                   "step = %.3f of default's comm" % (1e3 * report["latency_seconds"], g["allreduces_per_step"],
                                                      g["latency_allowance"]))
        out.append("sieve: of which all-reduce alone %.3f of default's all-reduce (goal <= %.3f plus latency), "
                   "compaction (gather and scatter) %.3f s per step" % (g["allreduce"] or 0, g["comm_at_most"],
                                                                        g["compaction_seconds"] or 0))
        if "default_alt_max_loss_difference" in g:
            out.append("default under another bucket size differs from default by at most %.3g (reduction order)" %
                       g["default_alt_max_loss_difference"])
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", action="store_true", help="only check that this interpreter can run the job")
    p.add_argument("--rank", type=int)
    p.add_argument("--world", type=int)
    p.add_argument("--master", help="rank 0's address (10.77.0.1 in a netlab lab)")
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--ifname", default="eth0")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches", type=int, default=2, help="distinct batches per rank, cycled")
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--density", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--alt-bucket-mb", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--timeout", type=int, default=900)
    args = p.parse_args()
    if args.probe:
        return probe()
    for name in ("rank", "world", "master"):
        if getattr(args, name) is None:
            p.error("--%s is required" % name)
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or not args.modes:
        p.error("--modes: unknown %s (%s)" % (",".join(unknown), ", ".join(MODES)))
    if args.steps < 1 or args.batch < 1 or args.batches < 1 or not 0 < args.density <= 1:
        p.error("--steps, --batch and --batches are positive; 0 < --density <= 1")

    # Never hang: the whole run is bounded.
    signal.signal(signal.SIGALRM, lambda *_: (print("ddp_train: timed out", file=sys.stderr), os._exit(3)))
    signal.alarm(args.timeout)
    import torch
    import torch.distributed as dist
    import torch.nn.utils.prune as prune
    import torchvision
    torch.set_num_threads(1)  # the nodes share the machine's cores
    os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (args.master, args.port), rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    latency = latency_seconds(torch, dist)
    mine = {}
    for mode in args.modes:
        mine[mode] = run_mode(args, mode, torch, dist, torchvision, prune)
        if args.rank == 0 and not args.quiet:
            print("ddp_train: %s done" % mode, file=sys.stderr, flush=True)
    gathered = [None] * args.world
    dist.all_gather_object(gathered, mine)  # after every measurement
    kept, elements = kept_fraction(build_model(torch, torchvision, prune, args.density))
    dist.destroy_process_group()
    if args.rank == 0:
        report = summarise(args, gathered, kept, elements, torch.__version__, latency)
        sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n" if args.json else table(report))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
