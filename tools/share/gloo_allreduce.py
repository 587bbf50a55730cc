#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's Gloo all-reduce of a model's gradient buckets: the real peer sieve-bench compares with.

One process per node, each in its node's network namespace (sieve-bench --gloo starts them; by
hand: tools/share/netlab.sh exec I build/venv/bin/python tools/share/gloo_allreduce.py --rank I ...). Every bucket is
all-reduced in DDP's order, one after the other, as sieve-bench's nodes do. Values are small
integers times 2^-6, so every sum is exact in fp32 and bf16 whatever order Gloo adds in; each result
is checked against the independently computed sum and any difference fails the run.

With --shards (sieve-bench --fsdp --gloo) it runs an FSDP step instead: per group, in forward order,
an all-gather of the parameter shards, then per group, in backward order, a reduce-scatter of the
gradients. Gloo has no reduce-scatter in older torch (1.13's raises "does not support"): there each
group's gradients are all-reduced instead and each rank keeps its own shard, which moves twice a
reduce-scatter's bytes; the JSON line says which ran ("reduce_scatter").

Prints one JSON line: seconds per all-reduce of the whole model (--shards: per step; the slowest
rank), kernel tx bytes per all-reduce (step) on this node's interface, and whether every element
was exact.
Needs a Python with PyTorch (sieve-bench --python; tools/install-deps.sh makes build/venv).
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time


def interface_bytes(ifname):
    """tx and rx byte counters of ifname in this process's network namespace."""
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == ifname:
                fields = rest.split()
                return int(fields[8]), int(fields[0])
    return None


def probe(dtype_name):
    """Exit 0 when a one-process Gloo group sums dtype_name; else print the reason as JSON, exit 4."""
    signal.alarm(60)
    import tempfile
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(json.dumps({"error": f"{sys.executable} cannot import PyTorch ({e}); pass sieve-bench --python a "
                                   "Python that has it (tools/install-deps.sh makes build/venv)"},
                         separators=(",", ":")), flush=True)
        return 4

    if not dist.is_gloo_available():
        print(json.dumps({"error": "this torch has no Gloo backend"}, separators=(",", ":")), flush=True)
        return 4
    dtype = torch.float32 if dtype_name == "fp32" else torch.bfloat16
    with tempfile.TemporaryDirectory() as directory:
        dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=0, world_size=1)
        try:
            dist.all_reduce(torch.ones(1, dtype=dtype))
        except RuntimeError as e:
            print(json.dumps({"error": f"Gloo in torch {torch.__version__} cannot sum {dtype_name}: {e}"},
                             separators=(",", ":")), flush=True)
            return 4
        finally:
            dist.destroy_process_group()
    return 0


class Pattern:
    """v(rank, it, i) = ±((7 i + 13 rank + 5 it) mod K + 1) / 64, sign alternating with i + rank: small
    integers, so every sum of up to `world` of them is exact in fp32 and bf16. Cheap int32 arithmetic on
    tensors precomputed once per buffer size."""

    def __init__(self, torch, sizes, world):
        self.torch = torch
        self.magnitude = max(1, min(64, 255 // world))  # every partial sum stays an integer <= 255
        self.bases = [(torch.arange(n, dtype=torch.int32) * 7) % self.magnitude for n in sizes]
        self.signs = [1 - 2 * (torch.arange(n, dtype=torch.int32) % 2) for n in sizes]

    def values(self, b, rank, iteration, part=slice(None)):
        """Buffer b's values on `rank`, or those of its elements `part`."""
        k = (self.bases[b][part] + (13 * rank + 5 * iteration)) % self.magnitude + 1
        v = k * self.signs[b][part] if rank % 2 == 0 else -k * self.signs[b][part]
        return v.to(self.torch.float32) / 64

    def sum(self, b, world, iteration, part=slice(None)):
        total = self.values(b, 0, iteration, part)
        for r in range(1, world):
            total += self.values(b, r, iteration, part)
        return total


def timed_iterations(args, torch, dist, fill, step, check):
    """warmup + iters rounds of: fill (untimed), barrier, step (timed), check (untimed, counts wrong
    elements). Returns the slowest rank's seconds per measured round, the wrong elements and this
    node's kernel tx bytes per measured round."""
    seconds, wrong, before = [], 0, None
    for it in range(args.warmup + args.iters):
        fill(it)
        if it == args.warmup:
            before = interface_bytes(args.ifname)
        dist.barrier()
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        wrong += check(it)
        if it >= args.warmup:
            seconds.append(elapsed)
    after = interface_bytes(args.ifname)
    slowest = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tx = (after[0] - before[0]) / args.iters if before and after else None
    return [round(s, 6) for s in slowest.tolist()], wrong, tx


def ddp_all_reduces(args, torch, dist, dtype):
    """Every bucket all-reduced in DDP's order."""
    sizes = [int(n) for n in args.buckets.split(",") if n]
    pattern = Pattern(torch, sizes, args.world)
    buffers = [torch.empty(n, dtype=dtype) for n in sizes]

    def fill(it):
        for b, buf in enumerate(buffers):
            buf.copy_(pattern.values(b, args.rank, it))

    def step():
        for buf in buffers:
            dist.all_reduce(buf)

    def check(it):
        return sum(int((buf.to(torch.float32) != pattern.sum(b, args.world, it)).sum())
                   for b, buf in enumerate(buffers))

    seconds, wrong, tx = timed_iterations(args, torch, dist, fill, step, check)
    return {"seconds": seconds, "logical_bytes": sum(sizes) * buffers[0].element_size() if buffers else 0,
            "tx_bytes_per_allreduce": tx, "exact": wrong == 0, "wrong_elements": wrong}


def has_reduce_scatter(torch, dist, dtype, world):
    """Whether this Gloo reduce-scatters: torch 1.13's raises on every rank alike, before any traffic."""
    try:
        dist.reduce_scatter(torch.empty(1, dtype=dtype), [torch.zeros(1, dtype=dtype) for _ in range(world)])
        return True
    except RuntimeError:
        return False


def fsdp_steps(args, torch, dist, dtype):
    """An FSDP step: every group's parameter shards all-gathered in forward order, then every group's
    gradients reduce-scattered in backward order (all-reduced where Gloo cannot reduce-scatter). A
    group's buffer is its world shards rank-major, as FSDP lays it out."""
    shards = [int(n) for n in args.shards.split(",") if n]
    world, rank = args.world, args.rank
    params = [torch.empty(world * s, dtype=dtype) for s in shards]
    grads = [torch.empty(world * s, dtype=dtype) for s in shards]
    reduced = [torch.empty(s, dtype=dtype) for s in shards]  # a reduce-scatter's output
    param_pattern = Pattern(torch, shards, world)
    grad_pattern = Pattern(torch, [world * s for s in shards], world)
    native = has_reduce_scatter(torch, dist, dtype, world)
    gather_seconds = []

    def own(buf, s):
        return buf[rank * s:(rank + 1) * s]

    def fill(it):
        for g, s in enumerate(shards):
            params[g].fill_(float("nan"))  # what the all-gather must overwrite
            own(params[g], s).copy_(param_pattern.values(g, rank, 2 * it))
            grads[g].copy_(grad_pattern.values(g, rank, 2 * it + 1))

    def step():
        start = time.perf_counter()
        for g, s in enumerate(shards):
            dist.all_gather(list(params[g].split(s)), own(params[g], s))
        gather_seconds.append(time.perf_counter() - start)
        for g in reversed(range(len(shards))):
            if native:
                dist.reduce_scatter(reduced[g], list(grads[g].split(shards[g])))
            else:
                dist.all_reduce(grads[g])
                reduced[g].copy_(own(grads[g], shards[g]))

    def check(it):
        wrong = 0
        for g, s in enumerate(shards):
            for owner, piece in enumerate(params[g].split(s)):
                wrong += int((piece.to(torch.float32) != param_pattern.values(g, owner, 2 * it)).sum())
            expected = grad_pattern.sum(g, world, 2 * it + 1, slice(rank * s, (rank + 1) * s))
            wrong += int((reduced[g].to(torch.float32) != expected).sum())
        return wrong

    seconds, wrong, tx = timed_iterations(args, torch, dist, fill, step, check)
    gathers = torch.tensor(gather_seconds[args.warmup:], dtype=torch.float64)
    dist.all_reduce(gathers, op=dist.ReduceOp.MAX)
    element = params[0].element_size() if params else 0
    return {"seconds": seconds, "all_gather_seconds": [round(s, 6) for s in gathers.tolist()],
            "reduce_scatter": "reduce_scatter" if native else "all_reduce",
            "logical_bytes": sum(world * s for s in shards) * element,
            "tx_bytes_per_allreduce": tx, "exact": wrong == 0, "wrong_elements": wrong}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", action="store_true",
                   help="only check that this Gloo can sum --dtype (one process, file store) and exit")
    p.add_argument("--rank", type=int)
    p.add_argument("--world", type=int)
    p.add_argument("--master", help="rank 0's address (10.77.0.1 in a netlab lab)")
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--ifname", default="eth0")
    p.add_argument("--buckets", help="comma-separated bucket sizes in elements, DDP order")
    p.add_argument("--shards", help="instead of --buckets: an FSDP step; comma-separated shard sizes in elements "
                   "(one rank's, padding included), one per group, forward order")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=int, default=300)
    args = p.parse_args()
    if args.probe:
        return probe(args.dtype)
    for name in ("rank", "world", "master"):
        if getattr(args, name) is None:
            p.error(f"--{name} is required")
    if (args.buckets is None) == (args.shards is None):
        p.error("give one of --buckets and --shards")

    # Never hang: the whole run is bounded.
    signal.signal(signal.SIGALRM, lambda *_: (print("gloo_allreduce: timed out", file=sys.stderr), os._exit(3)))
    signal.alarm(args.timeout)

    import torch
    import torch.distributed as dist

    if not dist.is_gloo_available():
        print("gloo_allreduce: this torch has no Gloo backend", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # the nodes share the machine's cores, as sieve-bench's nodes do
    os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    try:  # older Gloo builds cannot sum bf16: say so plainly rather than with a traceback
        dist.all_reduce(torch.ones(1, dtype=dtype))
    except RuntimeError as e:
        print(json.dumps({"rank": args.rank,
                          "error": f"Gloo in torch {torch.__version__} cannot sum {args.dtype}: {e}"},
                         separators=(",", ":")), flush=True)
        return 4

    if args.shards is not None:
        result = fsdp_steps(args, torch, dist, dtype)
    else:
        result = ddp_all_reduces(args, torch, dist, dtype)
    dist.destroy_process_group()
    result = {"rank": args.rank, "world": args.world, "dtype": args.dtype, **result, "torch": torch.__version__}
    wrong = result["wrong_elements"]
    print(json.dumps(result, separators=(",", ":")), flush=True)
    if wrong:
        print(f"gloo_allreduce: rank {args.rank}: {wrong} WRONG elements", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
