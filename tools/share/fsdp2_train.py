#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of sieve-bench --train fsdp2: real FSDP2 training (fully_shard on a CPU mesh, Gloo).

Trains a pruned model for --steps steps in one of three modes and prints one JSON line: every step's
loss (as its float32 bits, so equality is exact), time, time inside the group collectives, and the
bytes this node's interface sent; a digest of this rank's parameter shards at the end.

  fsdp2            FSDP2 as is (a block and the root per fully_shard)
  sieve            the same, after sieve.fsdp.compact(model): Sieve's custom collectives
  fsdp2-regrouped  FSDP2 as is, every other block in a group of its own and the rest in the root's:
                   FSDP's own result under another configuration (other buffers)
  fsdp2-shard1     FSDP2 as is, every parameter whose dim 1 divides among the ranks sharded on dim 1
                   (fully_shard's shard_placement_fn): its elements sit in other ranks' segments, so
                   at more than 2 ranks Gloo sums them in another order (FSDP's reduction-order noise)

Models: "transformer" (a decoder of torch.nn.Linear/LayerNorm/Embedding layers, its blocks' Linear
weights pruned 50 %) and "resnet18" (torchvision, its convolutions pruned 80 %), both with
torch.nn.utils.prune, the pruned weights zeroed in weight_orig too. At --skip-step one block's output is
detached, so that block has no gradient in that step.
"""

import argparse
import datetime
import hashlib
import json
import os
import sys
import threading
import time


def interface_tx(ifname):
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == ifname:
                return int(rest.split()[8])
    return 0


def import_sieve_fsdp():
    try:
        import sieve.fsdp
        return sieve.fsdp
    except ImportError:  # the source tree: tools/python next to this script (or one folder up)
        here = os.path.dirname(os.path.abspath(__file__))
        for candidate in (os.path.join(here, "python"), os.path.join(here, "..", "python")):
            if os.path.isfile(os.path.join(candidate, "sieve", "fsdp.py")):
                sys.path.insert(0, candidate)
                import sieve.fsdp
                return sieve.fsdp
        raise


def transformer(torch, args):
    nn, F = torch.nn, torch.nn.functional
    d, heads, ff, vocab, seq = args.width, 8, 4 * args.width, args.vocab, args.seq

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).transpose(1, 3).unbind(2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)
            self.skip = None

        def forward(self, tokens):
            x = self.emb(tokens) + self.pos
            for i, block in enumerate(self.blocks):
                y = block(x)
                x = x + (y - x).detach() if i == self.skip else y
            return self.head(self.ln(x))

    model = LM()
    for block in model.blocks:
        for lin in (block.qkv, block.proj, block.fc1, block.fc2):
            prune_zeroed(torch, lin, 0.5)

    def batch(g):
        tokens = torch.randint(0, vocab, (args.batch, seq + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    def loss_of(out, target):
        return F.cross_entropy(out.float().reshape(-1, vocab), target.reshape(-1))
    return model, list(model.blocks), batch, loss_of


def resnet18(torch, args):
    import torchvision
    nn, F = torch.nn, torch.nn.functional
    model = torchvision.models.resnet18(num_classes=10)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            prune_zeroed(torch, m, 0.8)
    blocks = [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
    skipped = model.layer1[1]  # same shape in and out: its output can be replaced by a detached one
    original = skipped.forward
    model.skip = None

    def forward(x):
        y = original(x)
        return x + (y - x).detach() if model.skip is not None else y
    skipped.forward = forward

    def batch(g):
        return (torch.randn(args.batch, 3, args.image, args.image, generator=g),
                torch.randint(0, 10, (args.batch,), generator=g))

    def loss_of(out, target):
        return F.cross_entropy(out.float(), target)
    return model, blocks, batch, loss_of


def prune_zeroed(torch, module, amount):
    import torch.nn.utils.prune as prune
    prune.l1_unstructured(module, "weight", amount=amount)
    with torch.no_grad():  # pruned weights exactly +0.0 (a product could leave -0.0), so the all-gather compacts too
        module.weight_orig.masked_fill_(module.weight_mask == 0, 0.0)


class Timed:
    """A group's collective object, timed: the same object FSDP would call, called the same way."""

    def __init__(self, inner, clock):
        self.inner, self.clock = inner, clock

    def allocate(self, *args, **kwargs):
        return self.inner.allocate(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        work = self.inner(*args, **kwargs)
        if work is not None:  # FSDP2 on CPU calls them synchronously; wait so the time is the collective's
            work.wait()
        self.clock[0] += time.perf_counter() - started
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--ifname", default="eth0")
    p.add_argument("--model", choices=["transformer", "transformer-23m", "resnet18"], default="transformer")
    p.add_argument("--mode", choices=["fsdp2", "sieve", "fsdp2-regrouped", "fsdp2-shard1"], default="fsdp2")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--skip-step", type=int, default=2, help="the step whose second block gets no gradient (-1: none)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--timeout", type=int, default=600)
    args = p.parse_args()
    if args.model == "transformer-23m":  # the size: 23.1 M parameters, the same decoder
        args.model, args.width, args.layers, args.vocab = "transformer", 512, 6, 4096
    # Never hang: a thread ends the process even while the main one waits inside Gloo or its store.
    watchdog = threading.Timer(args.timeout, lambda: (print("fsdp2_train: timed out", file=sys.stderr, flush=True),
                                                      os._exit(3)))
    watchdog.daemon = True
    watchdog.start()

    import warnings
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
        sieve_fsdp = import_sieve_fsdp() if args.mode == "sieve" else None
    except ImportError as error:
        print(json.dumps({"rank": args.rank, "error": "torch %s: %s" % (torch.__version__, error)}), flush=True)
        return 4
    torch.set_num_threads(1)  # the nodes share the machine's cores
    os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (args.master, args.port), rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    torch.manual_seed(0)
    model, blocks, batch, loss_of = (transformer if args.model == "transformer" else resnet18)(torch, args)
    mesh = init_device_mesh("cpu", (args.world,))
    kwargs = {}
    if args.mode == "fsdp2-shard1":
        from torch.distributed.tensor import Shard
        kwargs["shard_placement_fn"] = lambda p: Shard(1) if p.dim() > 1 and p.shape[1] % args.world == 0 else None
    # Regrouped: every other block in a group of its own, the rest in the root's.
    for block in blocks[::2] if args.mode == "fsdp2-regrouped" else blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    outcome = None
    if sieve_fsdp is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = sieve_fsdp.compact(model)
    clock = [0.0]
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", lambda: None)()
        group = getattr(state, "_fsdp_param_group", None) if state is not None else None
        if group is not None and not isinstance(group._reduce_scatter_comm, Timed):
            group._reduce_scatter_comm = Timed(group._reduce_scatter_comm, clock)
            group._all_gather_comm = Timed(group._all_gather_comm, clock)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + args.rank)
    losses, seconds, comm, tx = [], [], [], []
    dist.barrier()
    for step in range(args.steps):
        inputs, target = batch(g)
        model.skip = 1 if step == args.skip_step else None
        tx0, clock[0], started = interface_tx(args.ifname), 0.0, time.perf_counter()
        loss = loss_of(model(inputs), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - started)
        comm.append(clock[0])
        tx.append(interface_tx(args.ifname) - tx0)
        losses.append(loss.detach().float().view(torch.int32).item() & 0xFFFFFFFF)
    if os.environ.get("FSDP2_TRAIN_DUMP"):
        torch.save({n: q.detach().to_local().clone() for n, q in model.named_parameters()},
                   "%s.%d.pt" % (os.environ["FSDP2_TRAIN_DUMP"], args.rank))
    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().to_local().contiguous().view(torch.uint8).numpy().tobytes())
    total = sum(p.numel() for p in model.parameters())  # full sizes (DTensor numel is the global one)
    pruned = sum(int((b == 0).sum()) for n, b in model.named_buffers() if n.endswith("_mask"))
    result = {"rank": args.rank, "world": args.world, "mode": args.mode, "model": args.model, "parameters": total,
              "density": (total - pruned) / total, "losses": losses, "seconds": seconds, "comm_seconds": comm,
              "tx_bytes": tx, "digest": digest.hexdigest()[:16], "torch": torch.__version__}
    if sieve_fsdp is not None:
        stats = sieve_fsdp.stats()
        result["sieve"] = {"groups": outcome, "elements_sent": stats["elements_sent"],
                           "elements_dense": stats["elements_dense"], "fallback": stats["fallback"],
                           "dense": stats["dense"], "compacted": stats["compacted"]}
    dist.destroy_process_group()
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
