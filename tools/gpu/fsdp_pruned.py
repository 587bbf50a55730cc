# SPDX-License-Identifier: Apache-2.0
"""One rank of a PyTorch FSDP2 job (fully_shard) training a small MLP pruned 80 % with
torch.nn.utils.prune on synthetic data, twice: parameters and gradient reduction in fp32, then in
bf16 (MixedPrecisionPolicy). The GPU kit's step 6 (kit/step6_fsdp.py) runs it without the collective
proxy and with it (LD_PRELOAD, SIEVE_TRACK=on) and compares the losses bit for bit. Writes
{"configs": {"fp32": {"losses", "step_ms", "stats"}, "bf16": {...}}} to --out, where "stats" is what
the Sieve library counted during that configuration (the net plugin's bytes, the proxy's collectives).

With --publish (the kit runs it under the preloaded proxy), every rank calls sieve.publish_fsdp(model)
after the first step: the pruned parameters' all-gathers and the gradients' reduce-scatters get masks
that name the collective (FSDP allocates their buffers afresh every step, so masks on addresses would
never match), committed on FSDP's process group; the JSON's "publish" says what was published and
whether the commit was agreed, and "stats" how many collectives the proxy compacted.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune

if not os.environ.get("KIT_INSTALLED_PACKAGE"):  # run.sh --installed: the installed package instead
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:  # public from PyTorch 2.6
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # 2.4, 2.5
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

WIDTH, CLASSES = 1024, 10


def sieve_stats():
    """The library's counters when it is in the process (as the net plugin or preloaded), else {}."""
    try:
        import sieve
        return sieve.stats()
    except Exception:  # noqa: BLE001 (not loaded: NCCL without the Sieve plugin)
        return {}


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, int)}


def pruned_model(device, amount):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, CLASSES)).to(device)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    prune.global_unstructured([(m, "weight") for m in linears], pruning_method=prune.L1Unstructured, amount=amount)
    return model, linears


def train(config, args, device, rank, world):
    model, linears = pruned_model(device, args.prune)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if config == "bf16" \
        else MixedPrecisionPolicy()
    for layer in linears:  # one reduce-scatter per layer, as FSDP is used on transformer blocks
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator(device="cpu").manual_seed(2000 + rank)
    before = sieve_stats()
    losses, timed_from, published = [], min(5, args.steps - 1), None
    for step in range(args.steps):
        if step == timed_from:
            torch.cuda.synchronize()
            started = time.perf_counter()
        x = torch.randn(args.batch, WIDTH, generator=generator).to(device)
        y = torch.randint(0, CLASSES, (args.batch,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        global_loss = loss.detach().float().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
        if args.publish and step == 0:  # after one full step, between steps, on every rank
            import sieve
            outcome = sieve.publish_fsdp(model)
            published = {"all_gather": outcome["all_gather"], "reduce_scatter": outcome["reduce_scatter"],
                         "skipped": outcome["skipped"], "commits": [str(c) for c in outcome["commits"]]}
            if rank == 0:
                print("%s: published %s" % (config, published), flush=True)
        if rank == 0 and step % 25 == 0:
            print("%s step %d loss %.6f" % (config, step, losses[-1]), flush=True)
    torch.cuda.synchronize()
    step_ms = (time.perf_counter() - started) * 1e3 / (args.steps - timed_from)
    return {"losses": losses, "step_ms": step_ms, "stats": delta(sieve_stats(), before), "publish": published}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--prune", type=float, default=0.8)
    parser.add_argument("--out", required=True)
    parser.add_argument("--publish", action="store_true", help="sieve.publish_fsdp(model) after the first step")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(77)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # warn_only: an FSDP-internal op without a deterministic kernel must not end the run; a
    # nondeterminism it brings shows as a loss difference, which the step reports.
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda", int(os.environ.get("LOCAL_DEVICE", "0")))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    configs = {config: train(config, args, device, rank, world) for config in ("fp32", "bf16")}
    with open(args.out, "w") as out:
        json.dump({"rank": rank, "world": world, "torch": torch.__version__, "configs": configs,
                   "sieve_track": os.environ.get("SIEVE_TRACK", ""),
                   "preloaded": "libnccl-net-sieve.so" in os.environ.get("LD_PRELOAD", "")}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
