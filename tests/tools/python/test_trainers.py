# SPDX-License-Identifier: Apache-2.0
"""The trainers' recipes of docs/PYTORCH.md ("Trainers"), run for real: 2 processes, Gloo on loopback,
a model pruned with torch.nn.utils.prune and torch.ao.pruning, every loss and parameter bit-identical
to the same trainer without Sieve (the sign of zero folded, as test_ddp.py), and Sieve seen at work
(buckets compacted, none fallen back):
- Lightning (DDPStrategy): sieve.ddp registered on the strategy's DDP model in on_fit_start. On the
  CPU, DDPStrategy(ddp_comm_state=..., ddp_comm_hook=...) registers nothing (Lightning 2.6 registers
  a hook only on CUDA): checked here, so the recipe says so for as long as it holds;
- Lightning's FSDP2 (ModelParallelStrategy): sieve.fsdp.compact on the net configure_model sharded, in
  on_fit_start;
- Accelerate: accelerator.prepare(model), then model.register_comm_hook (its DistributedDataParallelKwargs
  takes only PyTorch's built-in hooks).
Both run in the same processes; the ranks' process group is made first (Lightning and Accelerate
take one that exists), through the parent's TCPStore.

Run it alone: python test_trainers.py (exit 77: no torch with Gloo here)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
from fsdp_test_ranks import init_gloo, run_ranks  # noqa: E402

from suite import require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
from torch.ao.pruning import WeightNormSparsifier  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
# The trainers are what this test is about: tools/install-deps.sh installs them beside torch, so
# their absence is a failure, not a skip.
import accelerate  # noqa: E402
import lightning  # noqa: E402
import sieve  # noqa: E402
import sieve.fsdp as sieve_fsdp  # noqa: E402
from sieve import ddp as sieve_ddp  # noqa: E402

STEPS = 4
BATCH = 8


def pruned_net():
    torch.manual_seed(11)
    net = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 4))
    sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
    sparsifier.prepare(net, config=[{"tensor_fqn": "0.weight"}])
    sparsifier.step()
    prune.l1_unstructured(net[2], "weight", amount=0.8)
    return net


def dataset():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(STEPS * BATCH * dist.get_world_size(), 12, generator=g)
    return torch.utils.data.TensorDataset(x, torch.randn(x.shape[0], 4, generator=g))


def bits(net):
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]  # FSDP2's DTensors
    return [(p.detach().float() + 0.0).view(torch.int32).clone() for p in full]


def same(label, a, b):
    assert a[0] == b[0], "%s: losses differ: %s vs %s" % (label, a[0], b[0])
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1])), "%s: a parameter differs" % label


def active(label, state):
    stats = state.stats
    assert stats["compacted"] > 0 and stats["fallback"] == 0, "%s: %s" % (label, stats)
    assert stats["elements_sent"] < 0.8 * stats["elements_dense"], "%s: %s" % (label, stats)


class Lit(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = pruned_net()
        self.losses = []

    def training_step(self, batch, _):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.losses.append(loss.detach().view(torch.int32).item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(dataset(), batch_size=BATCH, shuffle=False)


class SieveDDP(lightning.Callback):
    """The recipe: Sieve's hook on the DDP model the strategy made, before the first step."""

    def on_fit_start(self, trainer, pl_module):
        assert isinstance(trainer.strategy.model, DistributedDataParallel), type(trainer.strategy.model)
        self.state = sieve_ddp.register(trainer.strategy.model, masks=sieve.masks_from(pl_module, quiet=True))


def lightning_fit(callbacks=(), **strategy):
    from lightning.pytorch.strategies import DDPStrategy
    module = Lit()
    trainer = lightning.Trainer(accelerator="cpu", devices=dist.get_world_size(), num_nodes=1, max_steps=STEPS,
                                strategy=DDPStrategy(process_group_backend="gloo", bucket_cap_mb=0.001, **strategy),
                                callbacks=list(callbacks), logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=True)
    trainer.fit(module)
    return module.losses, bits(module)


def case_lightning():
    dense = lightning_fit()
    hook = SieveDDP()
    same("lightning", dense, lightning_fit([hook]))
    active("lightning", hook.state)
    # The strategy's own arguments: Lightning passes them to DDP only on CUDA. On the CPU the state
    # never sees a bucket, and the run is DDP's default.
    probe = sieve_ddp.CompactState(Lit())
    same("lightning ddp_comm_hook on the CPU", dense,
         lightning_fit(ddp_comm_state=probe, ddp_comm_hook=sieve_ddp.compact_hook))
    assert probe.stats["votes"] == 0, "Lightning registers ddp_comm_hook on the CPU now: update the recipe"


class LitFSDP2(Lit):
    """The LightningModule of ModelParallelStrategy, Lightning's FSDP2: configure_model applies
    fully_shard on the data-parallel mesh the strategy made (each linear, then the net)."""

    def configure_model(self):
        from torch.distributed.fsdp import fully_shard
        mesh = self.device_mesh["data_parallel"]
        for i in (0, 2, 4):
            fully_shard(self.net[i], mesh=mesh)
        fully_shard(self.net, mesh=mesh)


class SieveFSDP2(lightning.Callback):
    """The recipe: sieve.fsdp on the net configure_model sharded, before the first step."""

    def on_fit_start(self, trainer, pl_module):
        self.outcome = sieve_fsdp.compact(pl_module.net, masks=sieve.masks_from(pl_module.net, quiet=True))


def lightning_fsdp2_fit(callbacks=()):
    from lightning.pytorch.strategies import ModelParallelStrategy
    module = LitFSDP2()
    strategy = ModelParallelStrategy(data_parallel_size=dist.get_world_size(), tensor_parallel_size=1,
                                     process_group_backend="gloo")
    trainer = lightning.Trainer(accelerator="cpu", devices=dist.get_world_size(), num_nodes=1, max_steps=STEPS,
                                strategy=strategy, callbacks=list(callbacks), logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module)
    return module.losses, bits(module)


def case_lightning_fsdp2():
    dense = lightning_fsdp2_fit()
    hook = SieveFSDP2()
    before = sieve_fsdp.stats()
    same("lightning fsdp2", dense, lightning_fsdp2_fit([hook]))
    after = sieve_fsdp.stats()
    assert all(hook.outcome[label] in ("compacted", "gradients only") for label in ("0", "2")), hook.outcome
    assert after["compacted"] - before["compacted"] >= 2 * STEPS, (before, after)
    assert after["fallback"] == before["fallback"] and after["dense"] == before["dense"], (before, after)


def accelerate_fit(use_sieve):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs
    accelerator = Accelerator(cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(bucket_cap_mb=0.001)])
    net = pruned_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=BATCH, shuffle=False)
    model, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    assert isinstance(model, DistributedDataParallel), type(model)
    state = None
    if use_sieve:  # the recipe: on the prepared DDP model, before the first step
        state = sieve_ddp.register(model, masks=sieve.masks_from(model, quiet=True))
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.detach().view(torch.int32).item())
    assert len(losses) == STEPS, len(losses)
    return (losses, bits(net)), state


def case_accelerate():
    dense, _ = accelerate_fit(False)
    result, state = accelerate_fit(True)
    same("accelerate", dense, result)
    active("accelerate", state)


def worker(rank, world, port):
    # What a launcher (torchrun, Lightning's, Accelerate's) sets; the group itself exists already.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    init_gloo(rank, world, port)
    try:
        torch.set_num_threads(1)
        case_lightning()
        case_lightning_fsdp2()
        case_accelerate()
    finally:
        dist.destroy_process_group()


def main():
    versions = (lightning.__version__, accelerate.__version__)
    return run_ranks(__file__, worker, 2, 420,
                     "OK: Lightning %s (DDPStrategy with sieve.ddp, ModelParallelStrategy with sieve.fsdp) and "
                     "Accelerate %s bit-identical to the same trainer without Sieve at 2 ranks, compacted" % versions)


if __name__ == "__main__":
    sys.exit(main())
