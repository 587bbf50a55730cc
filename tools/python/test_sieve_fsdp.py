# SPDX-License-Identifier: Apache-2.0
"""sieve.fsdp on real FSDP2 (fully_shard on a CPU mesh, Gloo, 2 processes on loopback): every step's
loss and every parameter bit-identical to FSDP2 as is, with a step that leaves one parameter and one
whole block without a gradient, under mixed precision, and on the refusal paths.

Run it alone: python test_sieve_fsdp.py (exit 77: no torch with Gloo here)."""

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp_test_ranks import init_gloo, run_ranks  # noqa: E402

from suite import require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
import sieve.fsdp as sieve_fsdp  # noqa: E402

STEPS = 4


class Block(torch.nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)
        self.gate = torch.nn.Linear(width, width, bias=False)
        self.use_gate = True

    def forward(self, x):
        y = x + self.down(torch.relu(self.up(x)))
        return y * torch.sigmoid(self.gate(x)) if self.use_gate else y


class Net(torch.nn.Module):
    def __init__(self, width=13, hidden=27, blocks=3):  # odd sizes: FSDP pads every shard
        super().__init__()
        self.inp = torch.nn.Linear(6, width)
        self.blocks = torch.nn.ModuleList(Block(width, hidden) for _ in range(blocks))
        self.out = torch.nn.Linear(width, 3)
        self.skip_block = None

    def forward(self, x):
        x = self.inp(x)
        for i, block in enumerate(self.blocks):
            z = block(x)
            x = x + z.detach() if i == self.skip_block else z  # detached: that block gets no gradient
        return self.out(x)


def build(mp=None, rank_mask_seed=None, masks=None):
    """The test net, fully_shard wrapped. masks None: pruned 50 % with torch.nn.utils.prune (the pruned
    weights zeroed in weight_orig too); a dict: the same weights only zeroed (their gradients are not
    masked), their masks filled in by name."""
    torch.manual_seed(0)
    net = Net()
    for i, block in enumerate(net.blocks):
        for part in ("up", "down", "gate"):
            lin = getattr(block, part)
            if masks is not None:
                keep = lin.weight.abs() > lin.weight.abs().median()
                with torch.no_grad():
                    lin.weight.masked_fill_(~keep, 0.0)
                masks["blocks.%d.%s.weight" % (i, part)] = keep
                continue
            prune.l1_unstructured(lin, "weight", amount=0.5)
            if rank_mask_seed is not None:  # a mask that differs between ranks: compact() must refuse
                g = torch.Generator().manual_seed(rank_mask_seed)
                lin.weight_mask.copy_((torch.rand(lin.weight_mask.shape, generator=g) > 0.5).float())
            with torch.no_grad():  # +0.0: the sign of a zero the compacted all-gather does not carry
                lin.weight_orig.masked_fill_(lin.weight_mask == 0, 0.0)
    kwargs = {"mp_policy": mp} if mp is not None else {}
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in net.blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(net, mesh=mesh, **kwargs)
    return net


def bits(t):
    t = t.detach()
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return t.float().view(torch.int32).clone()


def train(net, steps=STEPS, sgd=False):
    # SGD with momentum keeps a gradient's sign of zero in its buffer; Adam's moments do not.
    opt = (torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9) if sgd else
           torch.optim.Adam(net.parameters(), lr=1e-2))
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for step in range(steps):
        x = torch.randn(8, 6, generator=g)
        y = torch.randn(8, 3, generator=g)
        net.skip_block = 1 if step == 2 else None
        net.blocks[0].use_gate = step != 1  # step 1: one parameter of block 0 has no gradient
        loss = torch.nn.functional.mse_loss(net(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().view(torch.int32).item())
    return losses, [bits(p) for p in net.parameters()]


def same(label, dense, sieve):
    assert dense[0] == sieve[0], "%s: losses differ: %s vs %s" % (label, dense[0], sieve[0])
    for i, (a, b) in enumerate(zip(dense[1], sieve[1])):
        assert torch.equal(a, b), "%s: parameter %d differs after training" % (label, i)


def case_exact(mp=None, label="fp32", sgd=False):
    before = sieve_fsdp.stats()
    dense = train(build(mp), sgd=sgd)
    net = build(mp)
    outcome = sieve_fsdp.compact(net)
    assert all(v == "compacted" for k, v in outcome.items() if k.startswith("blocks.")), outcome
    result = train(net, sgd=sgd)
    same(label, dense, result)
    after = sieve_fsdp.stats()
    compacted = after["compacted"] - before["compacted"]
    assert compacted >= 3 * STEPS, "%s: only %d collectives compacted" % (label, compacted)
    assert after["fallback"] == before["fallback"], "%s: a compacted collective fell back" % label
    assert after["dense"] == before["dense"], "%s: a compacted group ran a collective dense" % label
    sent = after["elements_sent"] - before["elements_sent"]
    dense_sent = after["elements_dense"] - before["elements_dense"]
    assert sent < 0.75 * dense_sent, "%s: sent %d of %d elements" % (label, sent, dense_sent)


def case_refused():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = build(rank_mask_seed=dist.get_rank())
        outcome = sieve_fsdp.compact(net)
    assert outcome["blocks.0"] == "the ranks' masks differ", outcome
    assert any("masks differ" in str(w.message) for w in caught), [str(w.message) for w in caught]
    before = sieve_fsdp.stats()
    train(net)
    assert sieve_fsdp.stats()["compacted"] == before["compacted"]
    # Masks given but not honoured (gradients nonzero where they prune): every rank falls back alike.
    dense = train(build(masks={}))
    masks = {}
    net = build(masks=masks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sieve_fsdp.compact(net, masks=masks)
        before = sieve_fsdp.stats()
        result = train(net)
    assert sieve_fsdp.stats()["fallback"] > before["fallback"]
    assert any("nonzero where its mask prunes" in str(w.message) for w in caught)
    same("fallback", dense, result)


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        case_exact(label="fp32 sgd", sgd=True)
        case_exact(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), "bf16/fp32 reduce")
        case_exact(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16), "bf16 reduce")
        case_refused()
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, 2, 480,
                     "OK: FSDP2 with sieve.fsdp bit-identical to FSDP2 at 2 ranks (fp32, bf16/fp32, bf16; skipped "
                     "gradients; refusal and fallback)")


if __name__ == "__main__":
    sys.exit(main())
