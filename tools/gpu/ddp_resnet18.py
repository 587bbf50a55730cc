# SPDX-License-Identifier: Apache-2.0
"""One rank of a PyTorch DDP job training a ResNet-18 (defined here: torchvision is not needed)
pruned 80 % with torch.nn.utils.prune, on synthetic data. Started by the GPU kit's step 5
(kit/step5_ddp.py, through run.sh) or tools/gpu/run_ddp_resnet18.sh, which run it without the
collective proxy, with published masks (--sieve), and with learned masks (SIEVE_TRACK), and compare
the losses bit for bit. Writes {"losses": [...], "stats": {...}, "step_ms": ...} to --out.

Settings the proxy needs, and why:
- DistributedDataParallel(..., gradient_as_bucket_view=True): gradients are views into the buckets
  NCCL all-reduces, and sieve.publish_pruned_model publishes one mask per bucket, composed from its
  gradients' masks;
- masks published and committed on every rank after the second backward (DDP rebuilds its buckets
  once, during the second iteration); the proxy activates them after every rank agreed;
- optimizer.zero_grad(set_to_none=False): keeps the gradient views (and their masks) in place.
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


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """The torchvision ResNet-18 layout (2-2-2-2 basic blocks, 64..512 channels, 11.2 M parameters
    at 1000 classes); a 3x3 stem for 32x32 inputs."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def deterministic():
    """Same numbers with and without Sieve need deterministic kernels. warn_only, as in
    fsdp_pruned.py: an op without a deterministic kernel must not end the run (the kit's step 5 would
    lose every table for it); it warns, and the bit-for-bit loss comparison with dense still catches
    any nondeterminism that reaches the results."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prune", type=float, default=0.8)
    parser.add_argument("--sieve", action="store_true", help="publish the pruning masks to the Sieve proxy")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(77)
    deterministic()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_DEVICE", "0")))
    torch.cuda.set_device(device)

    torch.manual_seed(0)
    model = ResNet18().to(device)
    weights = [(m, "weight") for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    prune.global_unstructured(weights, pruning_method=prune.L1Unstructured, amount=args.prune)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index], gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    if os.environ.get("SIEVE_TRACK", "").lower() in ("on", "1", "true", "yes") and not args.sieve:
        # Learned masks start at a commit: its vote compares every rank's SIEVE_TRACK* settings.
        import sieve
        verdict = sieve.commit()
        if rank == 0:
            print("commit for learning: %s %s" % (verdict["state"], verdict["reason"]), flush=True)
    generator = torch.Generator(device="cpu").manual_seed(1000 + rank)
    losses = []
    timed_from = min(10, args.steps - 1)  # after DDP's bucket rebuild and the masks' commit
    for step in range(args.steps):
        if step == timed_from:
            torch.cuda.synchronize()
            started = time.perf_counter()
        x = torch.randn(args.batch, 3, 32, 32, generator=generator).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=generator).to(device)
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        if args.sieve and step == 1:
            import sieve
            published = sieve.publish_pruned_model(model)
            if rank == 0:
                print("published %d masks" % published, flush=True)
        optimizer.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
        if rank == 0 and step % 50 == 0:
            print("step %d loss %.6f" % (step, losses[-1]), flush=True)

    torch.cuda.synchronize()
    step_ms = (time.perf_counter() - started) * 1e3 / (args.steps - timed_from)
    stats = {}
    try:
        import sieve
        stats = sieve.stats()
    except Exception as error:  # the library is not loaded: a plain NCCL run
        stats = {"error": str(error)}
    density = sum(int(m.weight_mask.sum()) for m, _ in weights) / sum(m.weight_mask.numel() for m, _ in weights)
    with open(args.out, "w") as out:
        json.dump({"rank": rank, "losses": losses, "stats": stats, "density": density, "step_ms": step_ms,
                   "sieve_track": os.environ.get("SIEVE_TRACK", ""), "published": args.sieve}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
