# SPDX-License-Identifier: Apache-2.0
"""sieve.fsdp on real FSDP2 (fully_shard on a CPU mesh, Gloo, 2 processes on loopback): every step's
loss and every parameter bit-identical to FSDP2 as is, with a step that leaves one parameter and one
whole block without a gradient, under mixed precision, and on the refusal paths.

Run it alone: python test_sieve_fsdp.py (exit 77: no torch with Gloo here)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
from fsdp_test_ranks import init_gloo, run_ranks, sieve_log  # noqa: E402

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


def build(mp=None, rank_mask_seed=None, masks=None, zero=True):
    """The test net, fully_shard wrapped. masks None: pruned 50 % with torch.nn.utils.prune (the pruned
    weights zeroed in weight_orig too); a dict: the same weights only zeroed (their gradients are not
    masked; zero=False: not even zeroed), their masks filled in by name."""
    torch.manual_seed(0)
    net = Net()
    for i, block in enumerate(net.blocks):
        for part in ("up", "down", "gate"):
            lin = getattr(block, part)
            if masks is not None:
                keep = lin.weight.abs() > lin.weight.abs().median()
                if zero:
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
    """t's bits, zero's sign folded (x + 0.0 turns -0.0 into +0.0): Sieve's one stated exception to
    bit-identity, +0.0 at a pruned position where FSDP's sum of -0.0 values gives -0.0."""
    t = t.detach()
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return (t.float() + 0.0).view(torch.int32).clone()


def train(net, steps=STEPS, sgd=False, between=None):
    # SGD with momentum keeps a gradient's sign of zero in its buffer; Adam's moments do not.
    opt = (torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9) if sgd else
           torch.optim.Adam(net.parameters(), lr=1e-2))
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for step in range(steps):
        if between is not None:
            between(step, net)
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
    with sieve_log() as caught:
        net = build(rank_mask_seed=dist.get_rank())
        outcome = sieve_fsdp.compact(net)
    assert outcome["blocks.0"] == "the ranks' masks differ", outcome
    assert any("masks differ" in w for w in caught), [w for w in caught]
    before = sieve_fsdp.stats()
    train(net)
    assert sieve_fsdp.stats()["compacted"] == before["compacted"]
    # Masks given but not honoured (gradients nonzero where they prune): every rank falls back alike.
    dense = train(build(masks={}))
    masks = {}
    net = build(masks=masks)
    with sieve_log() as caught:
        sieve_fsdp.compact(net, masks=masks)
        before = sieve_fsdp.stats()
        result = train(net)
    assert sieve_fsdp.stats()["fallback"] > before["fallback"]
    assert any("nonzero where its mask prunes" in w for w in caught)
    same("fallback", dense, result)


def linears(net):
    return [(i, getattr(block, part)) for i, block in enumerate(net.blocks) for part in ("up", "down", "gate")]


def reprune(net):
    """The same on every rank: the even blocks' masks grow (a third of their pruned weights come back,
    at weight_orig's zeros, where build left them), the odd blocks' shrink (a third of their kept
    weights go, zeroed in every rank's shard of weight_orig)."""
    from torch.distributed.tensor import distribute_tensor
    g = torch.Generator().manual_seed(5)
    for i, lin in linears(net):
        mask = lin.weight_mask
        pick = torch.rand(mask.shape, generator=g) < 1 / 3
        new = (mask.bool() | pick) if i % 2 == 0 else (mask.bool() & ~pick)
        orig = lin.weight_orig
        dropped = distribute_tensor((~new).float(), orig.device_mesh, orig.placements).to_local().bool()
        with torch.no_grad():
            orig.to_local().masked_fill_(dropped, 0.0)
        mask.copy_(new.float())


def case_reprune():
    """Re-pruning mid-training with compact() again: masks grown and shrunk after step 2, every loss
    and parameter as FSDP2's under the same re-prune, the new masks in the installed collectives."""
    def dense_between(step, net):
        if step == 2:
            reprune(net)

    dense = train(build(), sgd=True, between=dense_between)
    counts = {}

    def sieve_between(step, net):
        if step == 2:
            reprune(net)
            with sieve_log() as caught:
                counts["outcome"] = sieve_fsdp.compact(net)
            counts["warnings"] = [w for w in caught]
            counts["before"] = sieve_fsdp.stats()

    net = build()
    assert all(v == "compacted" for k, v in sieve_fsdp.compact(net).items() if k.startswith("blocks."))
    result = train(net, sgd=True, between=sieve_between)
    same("re-pruned", dense, result)
    outcome = counts["outcome"]
    assert all(v == "compacted" for k, v in outcome.items() if k.startswith("blocks.")), outcome
    assert not counts["warnings"], counts["warnings"]
    after = sieve_fsdp.stats()
    # With the old masks' collectives, the grown weights' gradients would raise every check.
    assert after["fallback"] == counts["before"]["fallback"], "a re-pruned collective fell back"
    assert after["compacted"] - counts["before"]["compacted"] >= 3 * 2, (counts["before"], after)
    for i, block in enumerate(net.blocks):
        group = block._get_fsdp_state()._fsdp_param_group
        layout = group._reduce_scatter_comm.layout
        pruned = sum(int((lin.weight_mask == 0).sum()) for _, lin in linears(net)[3 * i:3 * i + 3])
        assert layout.pruned == pruned, "blocks.%d: the collective prunes %d, the masks %d" % (i, layout.pruned, pruned)
        assert isinstance(group._all_gather_comm, sieve_fsdp.CompactAllGather)
    sieve_fsdp.uncompact(net)
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    group = net.blocks[0]._get_fsdp_state()._fsdp_param_group
    assert type(group._reduce_scatter_comm) is DefaultReduceScatter and type(group._all_gather_comm) is DefaultAllGather


def case_fallback_counted():
    """Gradients-only compaction (weights not zeroed where the masks prune, so the all-gather is
    FSDP's) whose gradients are not masked: every reduce-scatter falls back, and stats() counts the
    compacted attempt and the dense re-run both."""
    dense = train(build(masks={}, zero=False), steps=2)
    masks = {}
    net = build(masks=masks, zero=False)
    outcome = sieve_fsdp.compact(net, masks=masks)
    assert all(v == "gradients only" for k, v in outcome.items() if k.startswith("blocks.")), outcome
    before = sieve_fsdp.stats()
    with sieve_log():
        result = train(net, steps=2)
    after = sieve_fsdp.stats()
    same("fallback counted", dense, result)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["fallback"] == 3 * 2 and delta["compacted"] == 0, delta
    assert delta["elements_sent"] > delta["elements_dense"], "the dense re-runs are not counted: %s" % delta


def case_unused_params():
    """FSDP2 2.15's set_reduce_scatter_unused_params(True): a parameter without a gradient (block 0's
    gate in step 1, block 1 in step 2) travels as zeros, so its group's buffer keeps it; sieve.fsdp's
    layout keeps it too, and every step compacts, bit-identical to FSDP2 as is. PyTorch 2.11 has no
    such setting (its suite runs this on 2.15, as python_fsdp2_custom_collectives_newest)."""
    if not hasattr(build(), "set_reduce_scatter_unused_params"):
        assert torch.__version__ < "2.15", "PyTorch %s lost set_reduce_scatter_unused_params" % torch.__version__
        return
    dense_net = build()
    dense_net.set_reduce_scatter_unused_params(True)
    dense = train(dense_net)
    net = build()
    net.set_reduce_scatter_unused_params(True)
    outcome = sieve_fsdp.compact(net)
    assert all(v == "compacted" for k, v in outcome.items() if k.startswith("blocks.")), outcome
    before = sieve_fsdp.stats()
    result = train(net)
    after = sieve_fsdp.stats()
    same("unused params", dense, result)
    assert after["dense"] == before["dense"] and after["fallback"] == before["fallback"], (before, after)


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        case_exact(label="fp32 sgd", sgd=True)
        case_exact(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), "bf16/fp32 reduce")
        case_exact(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16), "bf16 reduce")
        case_refused()
        case_reprune()
        case_fallback_counted()
        case_unused_params()
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, 2, 480,
                     "OK: FSDP2 with sieve.fsdp bit-identical to FSDP2 at 2 ranks, the sign of zero aside (fp32, "
                     "bf16/fp32, bf16; skipped gradients; refusal and fallback, counted; re-pruning)")


if __name__ == "__main__":
    sys.exit(main())
