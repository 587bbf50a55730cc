# SPDX-License-Identifier: Apache-2.0
"""sieve.ddp's hook under torch.compile on the CPU (2 Gloo ranks on loopback, inductor): with
DDPOptimizer (optimize_ddp=True, PyTorch's default), with and without compiled autograd, every loss
and parameter bit-identical to the same compiled DDP without Sieve, buckets compacted; with compiled
autograd's Python reducer (optimize_ddp="python_reducer"), which calls a hook per parameter, refused on
every rank with one line naming the PyTorch version.

Run it alone: python test_compile.py (exit 77: no torch with Gloo here)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
from fsdp_test_ranks import init_gloo, run_ranks  # noqa: E402

from suite import require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch._dynamo  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
import sieve  # noqa: E402
from sieve import ddp as sieve_ddp  # noqa: E402

STEPS = 4


def net():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    prune.l1_unstructured(model[0], "weight", amount=0.7)
    prune.l1_unstructured(model[2], "weight", amount=0.8)
    return model


def train(use_sieve):
    torch._dynamo.reset()  # each run compiles its own DDP afresh
    model = net()
    ddp = DDP(model, broadcast_buffers=False)  # DDPOptimizer needs buckets above its 1 MB first one
    state = sieve_ddp.register(ddp, masks=sieve.masks_from(ddp, quiet=True)) if use_sieve else None
    compiled = torch.compile(ddp)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().view(torch.int32).item())
    return losses, [(p.detach() + 0.0).view(torch.int32).clone() for p in model.parameters()], state


def case(label, compiled_autograd, optimize_ddp):
    torch._dynamo.config.compiled_autograd = compiled_autograd
    torch._dynamo.config.optimize_ddp = optimize_ddp
    dense = train(False)
    result = train(True)
    assert dense[0] == result[0], "%s: losses differ" % label
    assert all(torch.equal(a, b) for a, b in zip(dense[1], result[1])), "%s: a parameter differs" % label
    stats = result[2].stats
    assert stats["compacted"] >= STEPS and stats["fallback"] == 0 and stats["dense"] == 0, (label, stats)


def case_python_reducer():
    torch._dynamo.config.compiled_autograd = True
    torch._dynamo.config.optimize_ddp = "python_reducer"
    try:
        train(True)
    except Exception as error:  # raised inside backward: autograd may wrap it
        text = str(error)
    else:
        raise AssertionError("the Python reducer ran sieve's hook without refusing")
    expected = "sieve.ddp.compact_hook does not support PyTorch %s's compiled-autograd Python reducer" % (
        torch.__version__)
    assert expected in text, text


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        torch.set_num_threads(1)
        case("DDPOptimizer", False, True)
        case("compiled autograd with DDPOptimizer", True, True)
        case_python_reducer()
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, 2, 480,
                     "OK: torch.compile (inductor, DDPOptimizer, with and without compiled autograd) with sieve.ddp "
                     "bit-identical to compiled DDP at 2 ranks; the Python reducer refused")


if __name__ == "__main__":
    sys.exit(main())
