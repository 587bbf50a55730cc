#!/usr/bin/python3
"""PyTorch's Gloo all-reduce of a model's gradient buckets: the real peer sieve-bench compares with.

One process per node, each in its node's network namespace (sieve-bench --gloo starts them; by
hand: tools/netlab.sh exec I /usr/bin/python3 tools/gloo_allreduce.py --rank I ...). Every bucket is
all-reduced in DDP's order, one after the other, as sieve-bench's nodes do. Values are small
integers times 2^-6, so every sum is exact in fp32 and bf16 whatever order Gloo adds in; each result
is checked against the independently computed sum and any difference fails the run.
Prints one JSON line: seconds per all-reduce of the whole model (the slowest rank), kernel tx bytes
per all-reduce on this node's interface, and whether every element was exact.
Needs the system python3 (Debian's python3-torch).
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
        print(json.dumps({"error": f"{sys.executable} cannot import PyTorch ({e}); on Debian: apt install python3-torch"},
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
            print(json.dumps({"error": f"Gloo in torch {torch.__version__} cannot sum {dtype_name}: {e}"}, separators=(",", ":")),
                  flush=True)
            return 4
        finally:
            dist.destroy_process_group()
    return 0


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
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=int, default=300)
    args = p.parse_args()
    if args.probe:
        return probe(args.dtype)
    for name in ("rank", "world", "master", "buckets"):
        if getattr(args, name) is None:
            p.error(f"--{name} is required")

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
    sizes = [int(n) for n in args.buckets.split(",") if n]
    magnitude = max(1, min(64, 255 // args.world))  # every partial sum stays an integer <= 255

    # v(rank, it, i) = ±((7 i + 13 rank + 5 it) mod K + 1), sign alternating with i + rank: cheap int32
    # arithmetic on tensors precomputed once per bucket.
    bases = [(torch.arange(n, dtype=torch.int32) * 7) % magnitude for n in sizes]
    signs = [1 - 2 * (torch.arange(n, dtype=torch.int32) % 2) for n in sizes]

    def values(b, rank, iteration):
        k = (bases[b] + (13 * rank + 5 * iteration)) % magnitude + 1
        return k * signs[b] if rank % 2 == 0 else -k * signs[b]

    try:  # older Gloo builds cannot sum bf16: say so plainly rather than with a traceback
        dist.all_reduce(torch.ones(1, dtype=dtype))
    except RuntimeError as e:
        print(json.dumps({"rank": args.rank, "error": f"Gloo in torch {torch.__version__} cannot sum {args.dtype}: {e}"},
                         separators=(",", ":")), flush=True)
        return 4

    buffers = [torch.empty(n, dtype=dtype) for n in sizes]
    seconds, wrong = [], 0
    before = None
    for it in range(args.warmup + args.iters):
        for b, buf in enumerate(buffers):
            buf.copy_(values(b, args.rank, it).to(torch.float32) / 64)
        if it == args.warmup:
            before = interface_bytes(args.ifname)
        dist.barrier()
        start = time.perf_counter()
        for buf in buffers:
            dist.all_reduce(buf)
        elapsed = time.perf_counter() - start
        for b, buf in enumerate(buffers):
            expected = values(b, 0, it)
            for r in range(1, args.world):
                expected += values(b, r, it)
            wrong += int((buf.to(torch.float32) != expected.to(torch.float32) / 64).sum())
        if it >= args.warmup:
            seconds.append(elapsed)
    after = interface_bytes(args.ifname)
    slowest = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    element_bytes = 4 if args.dtype == "fp32" else 2
    result = {
        "rank": args.rank,
        "world": args.world,
        "dtype": args.dtype,
        "seconds": [round(s, 6) for s in slowest.tolist()],
        "logical_bytes": sum(sizes) * element_bytes,
        "tx_bytes_per_allreduce": (after[0] - before[0]) / args.iters if before and after else None,
        "exact": wrong == 0,
        "wrong_elements": wrong,
        "torch": torch.__version__,
    }
    print(json.dumps(result, separators=(",", ":")), flush=True)
    if wrong:
        print(f"gloo_allreduce: rank {args.rank}: {wrong} WRONG elements", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
