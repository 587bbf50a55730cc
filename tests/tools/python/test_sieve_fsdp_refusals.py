# SPDX-License-Identifier: Apache-2.0
"""sieve.fsdp's refusals on real FSDP2 (fully_shard on a CPU mesh, Gloo, 2 processes on loopback): a
group sieve.fsdp cannot map exactly (tensor parallel on a 2-D mesh, parameters on different meshes in
one group, an all-gather extension) is refused with one warning line naming it and the reason, keeps
FSDP's own collectives, and trains bit-identically to FSDP2 as is, while the model's other groups
are still compacted. A PyTorch whose FSDP2 moved the private modules sieve.fsdp builds on is refused
with one line naming its version.

Run it alone: python test_sieve_fsdp_refusals.py (exit 77: no torch with Gloo here)."""

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
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter  # noqa: E402
from torch.distributed.tensor import Replicate  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import return_and_correct_aliasing  # noqa: E402
import sieve.fsdp as sieve_fsdp  # noqa: E402

STEPS = 3


class Block(torch.nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)
        self.gate = torch.nn.Linear(width, width, bias=False)

    def forward(self, x):
        return (x + self.down(torch.relu(self.up(x)))) * torch.sigmoid(self.gate(x))


class Net(torch.nn.Module):
    def __init__(self, width=12, hidden=26, blocks=2):  # 26 rows: FSDP pads up's shards
        super().__init__()
        self.inp = torch.nn.Linear(6, width)
        self.blocks = torch.nn.ModuleList(Block(width, hidden) for _ in range(blocks))
        self.out = torch.nn.Linear(width, 3)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


class GatherExtension(torch.Tensor):
    """A parameter with FSDP2's all-gather extension (the hooks float8 training uses): a wrapper
    subclass (it survives FSDP's sharding, which works below autograd) around its data, gathered as
    is, so training is plain training; but the all-gather's inputs are the extension's, not a flat
    slice sieve.fsdp can map."""

    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(), dtype=data.dtype,
                                                   device=data.device, requires_grad=data.requires_grad)

    def __init__(self, data):
        self._data = data

    def __repr__(self):
        return "GatherExtension(%r)" % (self._data,)

    def __tensor_flatten__(self):
        return ["_data"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return GatherExtension(inner["_data"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(t):
            return t._data if isinstance(t, GatherExtension) else t

        out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs or {}))
        out = pytree.tree_map(lambda t: GatherExtension(t) if isinstance(t, torch.Tensor) else t, out)
        return return_and_correct_aliasing(func, args, kwargs or {}, out)

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        return (self._data,), None

    def fsdp_post_all_gather(self, all_gather_outputs, metadata, param_dtype, *, out=None):
        (data,) = all_gather_outputs
        if out is not None:
            return None
        return data, (data,)


def prune_zero(net, masks):
    """Every block Linear's weight pruned to its larger half: block 0 with torch.nn.utils.prune (its
    gradients masked too, so it compacts exactly), block 1 zeroed and its masks given by name in
    masks (the group that is refused: naming it is no error)."""
    for i, block in enumerate(net.blocks):
        for part in ("up", "down", "gate"):
            lin = getattr(block, part)
            keep = lin.weight.detach().abs() > lin.weight.detach().abs().median()
            if i == 0:
                prune.custom_from_mask(lin, "weight", keep)
                with torch.no_grad():
                    lin.weight_orig.masked_fill_(~keep, 0.0)
                continue
            with torch.no_grad():
                lin.weight.masked_fill_(~keep, 0.0)
            masks["blocks.%d.%s.weight" % (i, part)] = keep


def build(variant, masks):
    """The net, pruned, with block 1 made unmappable by `variant`, fully_shard wrapped on the data
    parallel mesh (block by block, then the root)."""
    torch.manual_seed(0)
    net = Net()
    prune_zero(net, masks)
    world = dist.get_world_size()
    if variant in ("tensor_parallel", "mixed_meshes"):
        mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
        block = net.blocks[1]
        if variant == "tensor_parallel":
            parallelize_module(block, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel(),
                                                "gate": ColwiseParallel(output_layouts=Replicate())})
        else:  # one Linear of the group tensor parallel, the others plain
            parallelize_module(block, tp_mesh, {"gate": ColwiseParallel(output_layouts=Replicate())})
    else:
        dp_mesh = init_device_mesh("cpu", (world,))
        if variant == "gather_extension":
            lin = net.blocks[1].down
            lin.weight = torch.nn.Parameter(GatherExtension(lin.weight.detach().clone()))
    for block in net.blocks:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(net, mesh=dp_mesh)
    return net


def bits(t):
    """This rank's shard of a parameter, as int32 bits (each rank checks its own)."""
    t = t.detach()
    t = t._local_tensor if hasattr(t, "_local_tensor") else t
    t = t._data if isinstance(t, GatherExtension) else t
    assert type(t) is torch.Tensor, type(t)
    return t.float().view(torch.int32).clone()


def train(net):
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, 6, generator=g)
        y = torch.randn(8, 3, generator=g)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().view(torch.int32).item())
    return losses, [bits(p) for p in net.parameters()]


def case(variant, reason):
    dense = train(build(variant, {}))
    masks = {}
    net = build(variant, masks)
    with sieve_log() as caught:
        outcome = sieve_fsdp.compact(net, masks=masks)
    lines = [w for w in caught if w.startswith("sieve.fsdp:")]
    assert outcome["blocks.0"] == "compacted", (variant, outcome)  # a refusal is the group's alone
    assert reason in outcome["blocks.1"], (variant, outcome)
    assert lines == ["sieve.fsdp: blocks.1 runs FSDP's own collectives: %s" % outcome["blocks.1"]], (variant, lines)
    assert "\n" not in lines[0], lines
    groups = {label: net.get_submodule(label)._get_fsdp_state()._fsdp_param_group for label in ("blocks.0", "blocks.1")}
    assert type(groups["blocks.1"]._reduce_scatter_comm) is DefaultReduceScatter, variant
    assert type(groups["blocks.1"]._all_gather_comm) is DefaultAllGather, variant
    assert type(groups["blocks.0"]._reduce_scatter_comm) is sieve_fsdp.CompactReduceScatter, variant
    before = sieve_fsdp.stats()
    result = train(net)
    after = sieve_fsdp.stats()
    assert after["compacted"] - before["compacted"] >= 2 * STEPS, (variant, before, after)  # block 0's
    assert after["fallback"] == before["fallback"], variant
    assert dense[0] == result[0], "%s: losses differ: %s vs %s" % (variant, dense[0], result[0])
    for i, (a, b) in enumerate(zip(dense[1], result[1])):
        assert torch.equal(a, b), "%s: parameter %d differs after training" % (variant, i)


def case_moved_internals():
    """A PyTorch whose FSDP2 moved the private modules sieve.fsdp builds on (taken away here through
    sys.modules, then a class taken out of one): compact() refuses with one line naming the version,
    on every rank, before any collective, and FSDP keeps its own collectives."""
    import sieve
    for module, attribute in ((sieve_fsdp._API, None), (sieve_fsdp._COLLECTIVES, None),
                              (sieve_fsdp._COLLECTIVES, "DefaultReduceScatter"), (sieve_fsdp._API, "AllGather")):
        net = build("plain", {})
        saved = sys.modules[module]
        held = getattr(saved, attribute) if attribute else None
        if attribute:
            delattr(saved, attribute)
        else:
            sys.modules[module] = None  # what `import` of a module that is gone raises: ImportError
        try:
            sieve_fsdp.compact(net)
        except sieve.SieveError as error:
            text = str(error)
        else:
            text = None
        finally:
            sys.modules[module] = saved
            if attribute:
                setattr(saved, attribute, held)
        assert text is not None, "%s %s moved, and compact() did not refuse" % (module, attribute)
        assert text.startswith("sieve.fsdp does not support PyTorch %s: " % torch.__version__), text
        assert "\n" not in text and (attribute or module.rsplit(".", 1)[1]) in text, text
        group = net.blocks[0]._get_fsdp_state()._fsdp_param_group
        assert type(group._reduce_scatter_comm) is DefaultReduceScatter, "a refused compact() changed a collective"


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        case_moved_internals()
        case("tensor_parallel", "is a DTensor on a 2-D mesh dp=2 x tp=1 (tensor parallel)")
        case("mixed_meshes", "its parameters are on different meshes (blocks.1.gate.weight on dp=2 x tp=1")
        case("gather_extension", "all-gather extension")
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, 2, 480,
                     "OK: a PyTorch that moved FSDP2's private modules refused, naming its version; tensor parallel, "
                     "parameters on different meshes and an all-gather extension refused with one line each, trained "
                     "bit-identically to FSDP2 as is, the other groups compacted")


if __name__ == "__main__":
    sys.exit(main())
