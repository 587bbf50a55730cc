# SPDX-License-Identifier: Apache-2.0
"""The mask helpers against the real structures of PyTorch 2.11, not stand-ins: ranks as processes
on loopback, Gloo on the CPU (two; four for one case).

- publish_pruned_model against DDP's real buckets after their rebuild: over several steps every
  bucket DDP hands to its all-reduce has a mask at its address whose bits are exactly the bucket's
  nonzeros.
- publish_fsdp against FSDP2's (fully_shard) and FSDP1's (FullyShardedDataParallel) real
  collectives: every all-gather and reduce-scatter of three steps is captured where FSDP calls
  torch.distributed, with what was published. Each step's calls are the published masks one for one,
  in order, each exactly its buffer's nonzeros (the reduce-scatter's input; the all-gather's whole
  buffer, every rank's input). What the proxy does with those calls is asked of the proxy itself:
  every rank's calls and masks are replayed through the real Proxy on the fake backend
  (proxy_shape_replay, replay()), which must agree the commit, give every call its dense result
  exactly, decide alike on every rank and compact only with a mask of the call's own shape that is
  exactly its nonzeros; each case then says which calls run dense (the identical blocks, pruned
  differently, whose calls cannot say which mask is theirs; what publish_fsdp withholds) and how many
  compact (the root's). FSDP2: mixed precision, no reshard after forward, weights sharded on dim 1, a
  block on a second communicator, a parameter without a gradient for a step (with and without
  reshard), a frozen float32 bias and a reshard to a smaller mesh (4 ranks), a frozen float64
  parameter (gathered as bytes), tensor parallel on a 2-D mesh, an all-gather extension, and
  publish_fsdp's interface (names, forward_order, refusals, replacing, the commit's group). FSDP1:
  every backward prefetch, forward prefetch, SHARD_GRAD_OP in bfloat16 with a recorded forward
  order, NO_SHARD.

The ranks meet through a TCPStore that this process serves on a port the kernel picks (port 0): each
case under its own key prefix, nothing on the file system, no port chosen by one process and bound by
another. On a hang, every rank's Python stacks are dumped (faulthandler on SIGUSR1) into the failure.

Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so SIEVE_PROXY_REPLAY=build/tests/plugin/proxy/proxy_shape_replay
/opt/sieve/venv/bin/python tests/tools/python/test_real_torch.py
(exit 77: skipped as a whole, no torch 2.x with FSDP2 and Gloo; no library or no replay is a failure).
"""

import collections
import contextlib
import datetime
import faulthandler
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

if "--rank" in sys.argv:  # before torch's import: the parent asks for every thread's stack on a hang
    faulthandler.register(signal.SIGUSR1, all_threads=True)
HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
WORLD = 2
STEP_TIMEOUT = 400  # seconds for the two ranks' whole run (mostly importing torch; 210 s seen on the loaded VM)

from suite import main, require_torch, skip_script  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
import torch.distributed.fsdp as _fsdp  # noqa: E402
from fsdp_capture import Capture, Published, order_problems, replay, replay_part, unpack  # noqa: E402

if not hasattr(_fsdp, "fully_shard"):
    skip_script("needs FSDP2 (torch >= 2.6), this is torch %s" % torch.__version__)


class _Said(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def sieve_log():
    """The messages of the "sieve" logger (its operational notices) inside the block, as a list."""
    said, logger = _Said(), logging.getLogger("sieve")
    logger.addHandler(said)
    try:
        yield said.lines
    finally:
        logger.removeHandler(said)


TIMEOUT = datetime.timedelta(seconds=60)
# Every case's models and process groups, alive until the rank ends with os._exit. Freeing them hung a
# rank about one run in four here, with a file store and with a TCPStore alike: dropping the last
# reference to a case's ProcessGroupGloo (held by the DDP model, released when the case returns) runs
# its C++ destructor, and the rank never left the case's return line (faulthandler: no frame below
# it; Gloo's pt_gloo_runloop thread alive) while the other rank waited for it in the next case's
# init_process_group until its timeout. Nothing of Sieve runs there; the test keeps the objects
# instead of tearing Gloo down between cases.
_KEEP = []


def init(rank, store, world=WORLD):
    """A process group on the case's own prefix of the parent's TCPStore."""
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=TIMEOUT)


def prune_every_layer(model, seed, exclude=()):
    """Random masks, the same on every rank (one seed), about half of every weight and a third of every
    bias, through torch.nn.utils.prune; and the pruned elements of every weight_orig zero as well, so
    that the parameters FSDP gathers are zero exactly where pruned. Every row and column of a weight
    keeps an element: a fully pruned row or column would make gradients elsewhere zero (a dead unit),
    zeros no mask names, and "the mask is the buffer's zeros" would not hold for a reason of the
    model's, not of sieve's."""
    import torch.nn.utils.prune as prune
    generator = torch.Generator().manual_seed(seed)
    left_alone = {id(m) for held in exclude for m in held.modules()}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module) not in left_alone:
            rows, cols = module.weight.shape
            keep = torch.rand(rows, cols, generator=generator) < 0.5
            for i in range(max(rows, cols)):
                keep[i % rows, (i * 7) % cols] = True
            prune.custom_from_mask(module, "weight", keep)
            prune.custom_from_mask(module, "bias", torch.rand(rows, generator=generator) > 0.3)
            with torch.no_grad():
                module.weight_orig.mul_(module.weight_mask)
                module.bias_orig.mul_(module.bias_mask)


# --- DDP -------------------------------------------------------------------------------------------

def ddp_rank(rank, store):
    import sieve
    from sieve import masks
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    init(rank, store)
    # Tanh, not ReLU: no unit is dead for a whole batch, so every kept gradient element is nonzero.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 8))
    prune_every_layer(model, seed=1)
    # Small buckets: several of them, and DDP rebuilds them in backward order after the first step.
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=0.01)
    steps = []

    def hook(state, bucket):  # sees what DDP all-reduces, then does exactly DDP's default
        buffer = bucket.buffer()
        steps[-1].append({"index": bucket.index(), "address": buffer.data_ptr(), "count": buffer.numel(),
                          "nonzero": buffer.ne(0).clone()})
        return default_hooks.allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, hook)
    published = {}
    original = masks._publish_bits

    def record(address, count, dtype, bits, owner=None):
        published[address] = (count, dtype, unpack(bits, count))
        return original(address, count, dtype, bits, owner)
    masks._publish_bits = record
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)
    problems = []
    try:
        sieve.publish_pruned_model(model, commit_now=False)
        problems.append("published before any gradient exists")
    except sieve.SieveError:
        pass
    for step in range(5):
        steps.append([])
        optimizer.zero_grad()
        ddp(torch.randn(16, 32, generator=generator)).square().sum().backward()
        optimizer.step()
        if step == 1:  # after the second backward: the buckets are rebuilt
            count = sieve.publish_pruned_model(model, commit_now=False)
            if count != len(steps[-1]):
                problems.append("published %d masks for %d buckets" % (count, len(steps[-1])))
            staged = sieve.stats()["masks_published"]
            sieve.publish_pruned_model(model, commit_now=False)  # again: replaces, never adds
            if sieve.stats()["masks_published"] != staged:
                problems.append("publishing again added masks: %d -> %d" % (staged, sieve.stats()["masks_published"]))
    for step in range(2, 5):
        for bucket in steps[step]:
            where = "step %d, bucket %d" % (step, bucket["index"])
            mask = published.get(bucket["address"])
            if mask is None:
                problems.append("%s: no mask at the bucket's address" % where)
                continue
            if mask[0] != bucket["count"]:
                problems.append("%s: mask of %d elements, bucket of %d" % (where, mask[0], bucket["count"]))
            elif not torch.equal(mask[2], bucket["nonzero"]):
                differ = int((mask[2] != bucket["nonzero"]).sum())
                problems.append("%s: %d elements where the mask is not the bucket's nonzeros" % (where, differ))
    signature = sorted((count, int(bits.sum())) for count, _, bits in published.values())
    everyone = [None] * WORLD
    dist.all_gather_object(everyone, signature)
    if any(s != signature for s in everyone):
        problems.append("the ranks published different masks: %s" % everyone)
    sieve.retract_all(model, commit_now=False)
    _KEEP.append((ddp, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "buckets": len(steps[-1]), "masks": len(published),
            "checked": sum(len(s) for s in steps[2:])}


# --- FSDP2 and FSDP1 -------------------------------------------------------------------------------

class Block(torch.nn.Module if torch else object):
    """gate: a parameter that a step may leave out (skip_gate), so that it has no gradient then."""

    def __init__(self, width, gate=False):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        self.gate = torch.nn.Parameter(torch.linspace(0.5, 1.5, width)) if gate else None
        self.skip_gate = False

    def forward(self, x):
        y = x + self.down(torch.tanh(self.up(x)))
        return y if self.gate is None or self.skip_gate else y * self.gate


class Model(torch.nn.Module if torch else object):
    """FSDP's usual recipe: identical blocks, each its own unit, and the root holding the rest. Sizes
    chosen so that shards need padding (odd rows over 2 ranks). order: the blocks in the order forward
    runs them (not module order: what forward_order and FSDP1's recorded order are for)."""

    def __init__(self, width=10, blocks=3, gate=False, order=None):
        super().__init__()
        self.inp = torch.nn.Linear(7, width)
        self.blocks = torch.nn.ModuleList([Block(width, gate) for _ in range(blocks)])
        self.head = torch.nn.Linear(width, 5)
        self.order = list(order or range(blocks))

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        for i in self.order:
            x = self.blocks[i](x)
        return self.head(x)


def train_steps(model, optimizer, generator, capture, steps, before_step=None):
    for number in range(steps):
        if capture is not None:
            capture.step = number
        if before_step is not None:
            before_step(number)
        optimizer.zero_grad()
        model(torch.randn(6, 7, generator=generator)).square().sum().backward()
        optimizer.step()


def fsdp2_rank(rank, store, world=WORLD, reshard_after_forward=True, param_dtype=None, reduce_dtype=None,
               shard_dim=False, two_groups=False, skip_gate_at=None, frozen_f64=False, frozen_bias=False,
               block_1_reshard=None, tensor_parallel=False, extension=False, unpruned_block=None):
    """shard_dim: the blocks' weights sharded on dim 1 (shard_placement_fn). two_groups: block 0 on a
    second process group of the same ranks (a second communicator). skip_gate_at: in that captured
    step the last block's gate gets no gradient (FSDP2 reduce-scatters the group without it).
    frozen_f64: the last block holds a frozen float64 parameter (FSDP2 then all-gathers the group as
    bytes). frozen_bias: block 1's up.bias is frozen (requires_grad False: gathered, never reduced).
    block_1_reshard: block 1's reshard_after_forward (an int: re-gathered for backward on a smaller
    mesh's communicator). tensor_parallel: block 0 tensor parallel on a dp x tp = world x 1 mesh
    (DTensor parameters). extension: block 1's down.weight has FSDP2's all-gather extension.
    unpruned_block: that block's parameters are not pruned."""
    import sieve
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Shard
    init(rank, store, world)
    torch.manual_seed(0)
    model = Model(gate=skip_gate_at is not None)
    exclude = [model.blocks[b] for b in (unpruned_block, 0 if tensor_parallel else None, 1 if extension else None)
               if b is not None]
    prune_every_layer(model, seed=2, exclude=exclude)
    if frozen_f64:
        model.blocks[-1].register_parameter("frozen", torch.nn.Parameter(torch.arange(1.0, 6.0, dtype=torch.float64),
                                                                         requires_grad=False))
    if frozen_bias:
        model.blocks[1].up.bias_orig.requires_grad_(False)
    if extension:
        from test_sieve_fsdp_refusals import GatherExtension
        lin = model.blocks[1].down
        lin.weight = torch.nn.Parameter(GatherExtension(lin.weight.detach().clone()))
    if tensor_parallel:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh_2d = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "tp"))
        mesh = mesh_2d["dp"]
        parallelize_module(model.blocks[0], mesh_2d["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    else:
        mesh = init_device_mesh("cpu", (world,))
    # FSDP2 gathers the parameters in param_dtype and reduces the gradients in reduce_dtype, which it
    # drops when it equals param_dtype (the gradients are already in it)
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    placement = (lambda p: Shard(1) if p.dim() == 2 else None) if shard_dim else None
    for i, block in enumerate(model.blocks):
        block_mesh = DeviceMesh.from_group(dist.new_group(list(range(world))), "cpu") if two_groups and i == 0 else mesh
        reshard = block_1_reshard if i == 1 and block_1_reshard is not None else reshard_after_forward
        fully_shard(block, mesh=block_mesh, reshard_after_forward=reshard, mp_policy=policy,
                    shard_placement_fn=placement)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)
    train_steps(model, optimizer, generator, None, 1)
    capture, published = Capture(), Published()
    with sieve_log() as said:  # what is withheld comes back in result["skipped"]
        result = sieve.publish_fsdp(model, commit_now=False)
        again = sieve.publish_fsdp(model, commit_now=False)  # publishing again replaces it (the last one counts)
    published.entries[:] = published.entries[len(published.entries) // 2:]
    capture.on = True

    def gate(number):
        model.blocks[-1].skip_gate = number == skip_gate_at
    train_steps(model, optimizer, generator, capture, 3, gate)
    capture.on = False
    capture.close()
    published.close()
    plan_comms = [capture.comm_of(g) for g in result["groups"]]

    def expect_dtype(call):
        if frozen_f64 and call["kind"] == "all_gather" and call["dtype"] == torch.uint8:
            return None
        # Without reduce_dtype, PyTorch 2.11 reduces in param_dtype, 2.15 in the parameters' own dtype.
        reduce = reduce_dtype or (None if torch.__version__ >= "2.15" else param_dtype)
        return (param_dtype if call["kind"] == "all_gather" else reduce) or torch.float32
    steps = [s for s in range(3) if s != skip_gate_at]
    problems = order_problems(capture.calls, published.entries, plan_comms, steps, expect_dtype)
    replay = replay_part(capture, published.entries, plan_comms)
    if again["skipped"] != result["skipped"]:
        problems.append("publishing again withheld %s, the first time %s" % (again["skipped"], result["skipped"]))
    kinds = [c["kind"] for c in capture.calls]
    sieve.retract_all(model, commit_now=False)
    _KEEP.append((model, mesh, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "calls": len(kinds), "all_gathers": kinds.count("all_gather"),
            "reduce_scatters": kinds.count("reduce_scatter"), "masks": len(published.entries),
            "replay": replay,
            "published": [result["all_gather"], result["reduce_scatter"]], "skipped": result["skipped"],
            "said": [line for line in said if "sieve.publish_fsdp" in line],
            "groups": len(result["groups"]), "comms": len(capture.comms),
            "reduce_scatter_counts": sorted({c["count"] for c in capture.calls if c["kind"] == "reduce_scatter"}),
            "all_gather_counts": sorted({c["count"] for c in capture.calls if c["kind"] == "all_gather"}),
            "uint8_gathers": sum(1 for c in capture.calls if c["dtype"] == torch.uint8)}


def fsdp2_api_rank(rank, store):
    """publish_fsdp's interface on a real FSDP2 model: refused before FSDP2's lazy init; masks by name;
    forward_order for a forward that runs the blocks in reverse (checked against the real calls);
    shapes with nothing pruned (the root here) not published, a model with nothing pruned publishes
    nothing; bad input refused; publishing again replaces, all_gather=False publishes no all-gather;
    the commit runs on the group FSDP2 runs on (Gloo: no proxy takes it, so refused and said)."""
    import sieve
    from sieve import fsdp_masks
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    init(rank, store)
    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    model = Model(blocks=2, order=[1, 0])
    prune_every_layer(model, seed=3, exclude=[model.inp, model.head])  # the root prunes nothing
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    problems = []
    try:
        sieve.publish_fsdp(model, commit_now=False)
        problems.append("published before FSDP2's lazy init")
    except sieve.SieveError as error:
        if "run one training step" not in str(error):
            problems.append("before the lazy init: %s" % error)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)
    train_steps(model, optimizer, generator, None, 1)
    order = [model, model.blocks[1], model.blocks[0]]
    plain = fsdp_masks._fsdp_plan(model, forward_order=order)[0][0][1]
    bias = {"head.bias": torch.tensor([1, 0, 1, 0, 1])}
    given = fsdp_masks._fsdp_plan(model, forward_order=order, masks=bias)[0][0][1]
    if any(e.label == "<root>" for e in plain) or not any(e.label == "<root>" for e in given):
        problems.append("head.bias by name: the root's collectives are published only with it: %s, then %s" % (
            [e.label for e in plain], [e.label for e in given]))
    keep = torch.ones(5, 10, dtype=torch.bool)
    for bad in (dict(masks={"blocks.0.up.weight_orig": torch.ones(20, 10)}),  # pruned already
                dict(masks={"nope.weight": keep}), dict(masks={"head.bias": torch.ones(6)}), dict(masks={3: keep}),
                dict(forward_order=[model, model.blocks[0]]),
                dict(forward_order=[model, model.blocks[0], model.blocks[0]]),
                dict(forward_order=[model, model.blocks[0], model.head])):
        try:
            sieve.publish_fsdp(model, commit_now=False, **bad)
            problems.append("accepted %s" % sorted(bad))
        except sieve.SieveError:
            pass
    try:
        sieve.publish_fsdp(torch.nn.Linear(2, 2), commit_now=False)
        problems.append("published a model without FSDP")
    except sieve.SieveError:
        pass
    before = sieve.stats()["masks_published"]
    capture, published = Capture(), Published()
    with sieve_log() as said:
        result = sieve.publish_fsdp(model, forward_order=order)  # commits on FSDP2's group
    capture.on = True
    train_steps(model, optimizer, generator, capture, 3)
    capture.close()
    published.close()
    plan_comms = [capture.comm_of(g) for g in result["groups"]]
    problems += order_problems(capture.calls, published.entries, plan_comms, range(3))
    replay = replay_part(capture, published.entries, plan_comms)
    staged = sieve.stats()["masks_published"] - before
    without = sieve.publish_fsdp(model, commit_now=False, forward_order=order, all_gather=False)
    replaced = sieve.stats()["masks_published"] - before
    with sieve_log():  # its refusal is not news here
        sieve.retract_all(model)  # retracts, and commits on FSDP2's group
    left = sieve.stats()["masks_published"] - before
    # a model with nothing pruned: nothing to publish, which is no error
    torch.manual_seed(0)
    bare = Model(blocks=1)
    fully_shard(bare.blocks[0], mesh=mesh)
    fully_shard(bare, mesh=mesh)
    train_steps(bare, torch.optim.SGD(bare.parameters(), lr=0.01), generator, None, 1)
    nothing = sieve.publish_fsdp(bare, commit_now=False)
    fsdps_group = result["groups"] == [mesh.get_group()]
    _KEEP.append((model, bare, mesh, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "replay": replay,
            "published": [result["all_gather"], result["reduce_scatter"]], "skipped": result["skipped"],
            "commits": [c["state"] for c in result["commits"]], "group_is_fsdps": fsdps_group,
            "said_refused": any("sieve.commit" in line for line in said), "staged": staged,
            "without_all_gather": [without["all_gather"], without["reduce_scatter"]], "replaced": replaced,
            "left": left, "bare": [nothing["all_gather"], nothing["reduce_scatter"], len(nothing["groups"])],
            "calls": len(capture.calls), "masks": len(published.entries)}


def fsdp1_rank(rank, store, strategy="FULL_SHARD", prefetch="BACKWARD_PRE", param_dtype=None, order=None,
               forward_prefetch_limit=None):
    """FSDP1 (FullyShardedDataParallel, use_orig_params: alignment padding in its flat parameters) on
    the CPU: every block its own instance, then the root. order: the blocks in the order forward runs
    them (FSDP1 records it in the first step; publish_fsdp follows that record). forward_prefetch_limit:
    forward_prefetch on, reaching that far ahead (FSDP1's _forward_prefetch_limit)."""
    import sieve
    from sieve import fsdp_masks
    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    init(rank, store)
    torch.manual_seed(0)
    model = Model(order=order)
    by_name = param_dtype is not None  # head left unpruned, its bias's mask given by name to the plan
    prune_every_layer(model, seed=4, exclude=[model.head] if by_name else [])
    options = dict(device_id=torch.device("cpu"), use_orig_params=True, sharding_strategy=ShardingStrategy[strategy],
                   backward_prefetch=BackwardPrefetch[prefetch] if prefetch else None,
                   forward_prefetch=forward_prefetch_limit is not None,
                   mixed_precision=MixedPrecision(param_dtype=param_dtype) if param_dtype else None)
    for i in range(len(model.blocks)):
        model.blocks[i] = FSDP(model.blocks[i], **options)
    wrapped = FSDP(model, **options)
    problems = []
    try:
        sieve.publish_fsdp(wrapped, commit_now=False)
        problems.append("published before FSDP1's lazy init")
    except sieve.SieveError as error:
        if "run one training step" not in str(error):
            problems.append("before the lazy init: %s" % error)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)
    train_steps(wrapped, optimizer, generator, None, 1)
    if forward_prefetch_limit is not None:
        wrapped._exec_order_data._forward_prefetch_limit = forward_prefetch_limit  # shared by every instance
    padded = any(any(h.flat_param._is_padding_mask) for h in [m._handle for m in wrapped.modules()
                                                              if isinstance(m, FSDP) and m._handle is not None])
    capture, published = Capture(), Published()
    if by_name:  # the plan only: training keeps no zeros there (FSDP1's names lose their wrapper prefix)
        root = [e for e in fsdp_masks._fsdp_plan(wrapped)[0][0][1] if e.label == "<root>"]
        named = [e for e in fsdp_masks._fsdp_plan(wrapped, masks={"head.bias": torch.tensor([1, 0, 1, 1, 0])})[0][0][1]
                 if e.label == "<root>"]
        if [int(e.bits.sum()) - 2 for e in root] != [int(e.bits.sum()) for e in named]:
            problems.append("head.bias by name does not prune its two elements in the root's collectives")
    result = sieve.publish_fsdp(wrapped, commit_now=False)
    capture.on = True
    train_steps(wrapped, optimizer, generator, capture, 3)
    capture.close()
    published.close()
    plan_comms = [capture.comm_of(g) for g in result["groups"]]

    def expect_dtype(call):  # FSDP1 reduces in param_dtype when reduce_dtype is not set
        return param_dtype or torch.float32
    # With forward_prefetch, FSDP1 issues some backward calls in another order than _issue_order
    # says (seen here: block 1's backward prefetch before block 3's reduce-scatter, and with a limit
    # of 2 the blocks' reduce-scatters out of module order; the cause, in autograd's order of hooks,
    # is not pinned down). The proxy matches a call by its shape alone, so the table's order changes
    # no call's mask: the forward's all-gathers (4, where the prefetch limit shows) are checked in
    # order, the backward's as the same masks in any order.
    problems += order_problems(capture.calls, published.entries, plan_comms, range(3), expect_dtype,
                               in_order=4 if forward_prefetch_limit is not None else None)
    replay = replay_part(capture, published.entries, plan_comms)
    kinds = [c["kind"] for c in capture.calls]
    sieve.retract_all(wrapped, commit_now=False)
    # NO_SHARD all-reduces: nothing to publish
    torch.manual_seed(0)
    plain = Model(blocks=1)
    prune_every_layer(plain, seed=4)
    plain.blocks[0] = FSDP(plain.blocks[0], device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.NO_SHARD)
    plain = FSDP(plain, device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.NO_SHARD)
    train_steps(plain, torch.optim.SGD(plain.parameters(), lr=0.01), generator, None, 1)
    no_shard = fsdp_masks._fsdp_plan(plain)[0]
    _KEEP.append((wrapped, plain, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "replay": replay,
            "all_gathers": kinds.count("all_gather"), "reduce_scatters": kinds.count("reduce_scatter"),
            "published": [result["all_gather"], result["reduce_scatter"]], "skipped": result["skipped"],
            "masks": len(published.entries), "padded": padded, "no_shard_plan": len(no_shard)}


# (name, world size, rank function); the 4-rank case first: ranks 2 and 3 run it alone and leave.
CASES = [("fsdp2_reshard_to_2", 4, lambda rank, store: fsdp2_rank(rank, store, 4, block_1_reshard=2, frozen_bias=True)),
         ("ddp", WORLD, lambda rank, store: ddp_rank(rank, store)),
         ("fsdp2", WORLD, lambda rank, store: fsdp2_rank(rank, store)),
         ("fsdp2_no_reshard", WORLD, lambda rank, store: fsdp2_rank(rank, store, reshard_after_forward=False)),
         ("fsdp2_bf16_params", WORLD, lambda rank, store: fsdp2_rank(rank, store, param_dtype=torch.bfloat16,
                                                                     reduce_dtype=torch.float32)),
         ("fsdp2_bf16", WORLD, lambda rank, store: fsdp2_rank(rank, store, param_dtype=torch.bfloat16,
                                                              reduce_dtype=torch.bfloat16)),
         # reduce_dtype=None: PyTorch 2.11 reduces in param_dtype, 2.15 in the parameters' own float32
         ("fsdp2_bf16_no_reduce_dtype", WORLD, lambda rank, store: fsdp2_rank(rank, store,
                                                                              param_dtype=torch.bfloat16)),
         ("fsdp2_shard_dim", WORLD, lambda rank, store: fsdp2_rank(rank, store, shard_dim=True)),
         ("fsdp2_two_groups", WORLD, lambda rank, store: fsdp2_rank(rank, store, two_groups=True)),
         ("fsdp2_two_groups_one_unpruned", WORLD,
          lambda rank, store: fsdp2_rank(rank, store, two_groups=True, unpruned_block=0)),
         ("fsdp2_skipped_parameter", WORLD, lambda rank, store: fsdp2_rank(rank, store, skip_gate_at=1)),
         ("fsdp2_no_reshard_skipped_parameter", WORLD,
          lambda rank, store: fsdp2_rank(rank, store, reshard_after_forward=False, skip_gate_at=1)),
         ("fsdp2_frozen_f64", WORLD, lambda rank, store: fsdp2_rank(rank, store, frozen_f64=True)),
         ("fsdp2_tensor_parallel", WORLD, lambda rank, store: fsdp2_rank(rank, store, tensor_parallel=True)),
         ("fsdp2_extension", WORLD, lambda rank, store: fsdp2_rank(rank, store, extension=True)),
         ("fsdp2_api", WORLD, lambda rank, store: fsdp2_api_rank(rank, store)),
         ("fsdp1_backward_pre", WORLD, lambda rank, store: fsdp1_rank(rank, store)),
         ("fsdp1_backward_post", WORLD, lambda rank, store: fsdp1_rank(rank, store, prefetch="BACKWARD_POST")),
         ("fsdp1_no_prefetch", WORLD, lambda rank, store: fsdp1_rank(rank, store, prefetch=None)),
         ("fsdp1_grad_op_bf16_recorded_order", WORLD,
          lambda rank, store: fsdp1_rank(rank, store, "SHARD_GRAD_OP", param_dtype=torch.bfloat16, order=[2, 0, 1])),
         ("fsdp1_forward_prefetch", WORLD, lambda rank, store: fsdp1_rank(rank, store, forward_prefetch_limit=2))]
RANKS = max(world for _, world, _ in CASES)


def rank_main(rank, port):
    """Every case in turn, each on its own process group and key prefix: {case: result}."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
    return {case: run(rank, dist.PrefixStore(case, store)) for case, world, run in CASES if rank < world}


def run_ranks():
    """Runs every case on RANKS processes (ranks past WORLD take part only in the cases of more
    ranks); returns each rank's results (its JSON line). The store lives here, in the parent, for the
    whole run: the ranks come and go as its clients."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT, wait_for_workers=False)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        # Output to files, not pipes: a rank never blocks on a full pipe that nobody reads yet.
        logs = [(open(os.path.join(tmp, "out%d" % r), "w+"), open(os.path.join(tmp, "err%d" % r), "w+"))
                for r in range(RANKS)]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(rank), str(store.port)],
                                  env=env, stdout=logs[rank][0], stderr=logs[rank][1]) for rank in range(RANKS)]

        def tail(rank, n=3000):
            logs[rank][1].seek(0)
            return logs[rank][1].read()[-n:]

        def failed(what):
            """Every rank still running dumps its stacks; the failure shows every rank's output."""
            for other in procs:
                if other.poll() is None:
                    other.send_signal(signal.SIGUSR1)
            time.sleep(3)
            return AssertionError("%s; every rank's output (stacks of those still running):\n%s" % (
                what, "\n".join("rank %d:\n%s" % (r, tail(r, 6000)) for r in range(RANKS))))
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            for rank, proc in enumerate(procs):
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise failed("a rank did not finish in %d s" % STEP_TIMEOUT) from None
                if proc.returncode != 0:
                    raise failed("rank %d exited %d" % (rank, proc.returncode))
            results = []
            for rank in range(RANKS):
                logs[rank][0].seek(0)
                results.append(json.loads(logs[rank][0].read().strip().splitlines()[-1]))
            return results
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for out, err in logs:
                out.close()
                err.close()


class RealStructures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ranks = run_ranks()
        for case, world, _ in CASES:
            found = [(rank, results[case]) for rank, results in enumerate(cls.ranks) if case in results]
            if found and "replay" in found[0][1]:
                replay(case, found)

    def results(self, case):
        found = [(rank, results[case]) for rank, results in enumerate(self.ranks) if case in results]
        self.assertGreaterEqual(len(found), WORLD, case)
        return found

    def check_dense(self, result, blocks, others=(), where=""):
        """result's dense calls: `blocks` of them on one communicator in one shape, the identical
        blocks' (pruned differently, so no call of theirs can say which of their masks is its own: the
        proxy runs them dense and its log names that shape), and the others exactly `others`
        ((kind, communicator, step) of each, in call order)."""
        shapes = collections.Counter((d["count"], d["comm"]) for d in result["dense"])
        shape = shapes.most_common(1)[0][0] if blocks else None
        self.assertEqual(shapes[shape] if blocks else 0, blocks, where)
        self.assertEqual([(d["kind"], d["comm"], d["step"]) for d in result["dense"]
                          if (d["count"], d["comm"]) != shape], list(others), where)
        if blocks:
            self.assertTrue(any("several different" in line and "of %d x" % shape[0] in line for line in result["log"]),
                            "%s: %s" % (where, result["log"]))

    def test_publish_pruned_model_covers_ddps_real_buckets_after_the_rebuild(self):
        for rank, result in self.results("ddp"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertGreaterEqual(result["buckets"], 2, "small buckets: several per step")
            self.assertEqual(result["masks"], result["buckets"])
            self.assertEqual(result["checked"], 3 * result["buckets"])

    def test_publish_fsdp_covers_fully_shards_real_collectives_in_their_order(self):
        for rank, result in self.results("fsdp2"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            # per step: 4 groups gathered in forward and again in backward (the root too: it was given
            # reshard_after_forward=True), 4 reduce-scatters; the root's 3 compact, the blocks' 9 cannot
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))
            self.check_dense(result, 3 * 9, where="rank %d" % rank)
            self.assertEqual(result["compacted"], 3 * 3)

    def test_publish_fsdp_with_mixed_precision_gathers_in_param_dtype_and_reduces_in_reduce_dtype(self):
        # reduce in float32; in bf16 (= param_dtype); as the PyTorch at hand does without reduce_dtype
        for case in ("fsdp2_bf16_params", "fsdp2_bf16", "fsdp2_bf16_no_reduce_dtype"):
            for rank, result in self.results(case):
                self.assertEqual(result["problems"], [], "%s, rank %d" % (case, rank))
                self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))
                self.check_dense(result, 3 * 9, where="%s, rank %d" % (case, rank))
                self.assertEqual(result["compacted"], 3 * 3)

    def test_publish_fsdp_without_reshard_after_forward(self):
        for rank, result in self.results("fsdp2_no_reshard"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 4, 3 * 4))
            self.check_dense(result, 3 * 6, where="rank %d" % rank)
            self.assertEqual(result["compacted"], 3 * 2)

    def test_publish_fsdp_with_weights_sharded_on_dim_1(self):
        for rank, result in self.results("fsdp2_shard_dim"):
            self.assertEqual((result["problems"], result["skipped"]), ([], []), "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))
            self.check_dense(result, 3 * 9, where="rank %d" % rank)
            self.assertEqual(result["compacted"], 3 * 3)

    def test_a_shape_on_two_communicators_is_withheld_and_the_rest_compacts(self):
        for rank, result in self.results("fsdp2_two_groups"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual((result["groups"], result["comms"]), (2, 2))
            self.assertEqual(len(result["skipped"]), 2)  # the blocks' all-gather and reduce-scatter shapes
            self.assertTrue(all("several communicators" in s for s in result["skipped"]), result["skipped"])
            # Every call of the blocks (either communicator) runs dense; the root's (2 all-gathers
            # and a reduce-scatter per step) find their masks.
            self.assertTrue(all(d["count"] == result["dense"][0]["count"] for d in result["dense"]))
            self.assertEqual(result["calls"] - len(result["dense"]), 3 * 3)

    def test_a_parameter_without_a_gradient_runs_only_that_reduce_scatter_dense(self):
        for rank, result in self.results("fsdp2_skipped_parameter"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.check_dense(result, 3 * 9 - 1, [("reduce_scatter", 0, 1)], "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))
            self.assertEqual(result["compacted"], 3 * 3)

    def test_a_group_gathered_as_bytes_is_withheld(self):
        for rank, result in self.results("fsdp2_frozen_f64"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertTrue(any("as bytes" in s for s in result["skipped"]), result["skipped"])
            # the last block's gathers, in bytes (forward and backward), run dense besides the blocks' calls
            self.assertEqual(result["uint8_gathers"], 3 * 2)
            self.check_dense(result, 3 * 7, [("all_gather", 0, step) for step in range(3) for _ in range(2)],
                             "rank %d" % rank)
            self.assertEqual(result["compacted"], 3 * 3)

    def test_frozen_parameters_and_a_reshard_to_a_smaller_mesh(self):
        """4 ranks (2 ranks cannot: 2.11 turns reshard_after_forward=1 into False and =2 into True on
        a 2-rank mesh): block 1 re-gathers for backward on a 2-rank mesh's communicator, which
        publish_fsdp leaves dense; its frozen bias is gathered and never reduced."""
        for rank, result in self.results("fsdp2_reshard_to_2"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual((result["comms"], result["groups"]), (2, 1))
            # blocks 0 and 2, and block 1's gathers (its shape), run dense on FSDP's communicator
            self.check_dense(result, 3 * 7, [("all_gather", 1, step) for step in range(3)], "rank %d" % rank)
            # FSDP's own communicator: 4 groups gathered in forward, 3 again in backward; 4 reduce-scatters
            self.assertEqual(result["published"], [7, 4])
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))
            gathers, scatters = result["all_gather_counts"], result["reduce_scatter_counts"]
            frozen = [c for c in scatters if c not in gathers]  # block 1 reduces fewer elements than it gathers
            self.assertEqual(len(frozen), 1, (gathers, scatters))
            self.assertLess(frozen[0], max(gathers))
            self.assertEqual(result["compacted"], 3 * 3 + 3, "the root's calls and block 1's reduce-scatters")

    def test_without_reshard_a_skipped_parameter_runs_only_that_reduce_scatter_dense(self):
        """No call takes another group's mask: the skipped block's reduce-scatter finds no mask of its
        shape; the identical blocks' masks differ, so their calls run dense."""
        for rank, result in self.results("fsdp2_no_reshard_skipped_parameter"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.check_dense(result, 3 * 6 - 1, [("reduce_scatter", 0, 1)], "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 4, 3 * 4))
            self.assertEqual(result["compacted"], 3 * 2, "the root's all-gather and reduce-scatter")

    def test_tensor_parallel_parameters_withhold_their_whole_shape_and_are_said_once(self):
        """Block 0 tensor parallel on a dp=2 x tp=1 mesh (DTensor parameters): the blocks share its
        shapes, so none of them is published; the root's still are. Published twice, said once."""
        for rank, result in self.results("fsdp2_tensor_parallel"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual(len(result["skipped"]), 2)
            self.assertTrue(all("tensor-parallel" in s for s in result["skipped"]), result["skipped"])
            self.assertEqual(len(result["said"]), 2, "said once per process, listed every time")
            self.assertEqual(result["published"], [2, 1])
            self.assertEqual(len(result["dense"]), 3 * 9, "every call of the blocks")

    def test_an_all_gather_extension_leaves_every_all_gather_dense(self):
        for rank, result in self.results("fsdp2_extension"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertTrue(any("all-gather extension" in s for s in result["skipped"]), result["skipped"])
            self.assertEqual(result["published"], [0, 4])
            # the root's gathers besides the blocks' calls; the root's reduce-scatters compact
            self.check_dense(result, 3 * 9, [("all_gather", 0, step) for step in range(3) for _ in range(2)],
                             "rank %d" % rank)
            self.assertEqual(result["compacted"], 3)

    def test_a_shape_on_another_communicator_that_prunes_nothing_is_still_withheld(self):
        """Block 0, on a second communicator, prunes nothing: its shape is still the blocks', so
        publishing it on FSDP's communicator would hand block 0's calls there no mask and the
        others' theirs: it is withheld on both, as when block 0 prunes."""
        for rank, result in self.results("fsdp2_two_groups_one_unpruned"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual(result["published"], [2, 1])
            self.assertEqual(len(result["skipped"]), 2)
            self.assertEqual(result["calls"] - len(result["dense"]), 3 * 3)

    def test_publish_fsdps_interface_on_a_real_model(self):
        for rank, result in self.results("fsdp2_api"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            # the root prunes nothing: its all-gather and reduce-scatter (one each a step: fully_shard's
            # default keeps the root gathered for backward) are not published
            self.assertEqual((result["published"], result["masks"], result["staged"]), ([4, 2], 6, 6))
            # the root's calls, not published, and the two blocks', pruned differently: nothing compacts
            self.check_dense(result, 3 * 6, [(kind, 0, step) for step in range(3)
                                             for kind in ("all_gather", "reduce_scatter")], "rank %d" % rank)
            self.assertEqual(result["compacted"], 0)
            self.assertEqual(result["calls"], 3 * 8)
            self.assertEqual((result["without_all_gather"], result["replaced"], result["left"]), ([0, 2], 2, 0))
            self.assertEqual(result["bare"], [0, 0, 1], "nothing pruned: nothing published, no error")
            self.assertEqual(result["commits"], ["refused"], "Gloo: no proxy takes the commit")
            self.assertTrue(result["group_is_fsdps"])
            self.assertTrue(result["said_refused"])

    def test_publish_fsdp_covers_fsdp1s_real_collectives(self):
        """FullyShardedDataParallel (use_orig_params: alignment padding, gathered as FSDP's filler
        value) on the CPU, FULL_SHARD: the root keeps its parameters for backward, the blocks
        gather again; every backward prefetch mode."""
        for case in ("fsdp1_backward_pre", "fsdp1_backward_post", "fsdp1_no_prefetch", "fsdp1_forward_prefetch"):
            for rank, result in self.results(case):
                self.assertEqual((result["problems"], result["skipped"]), ([], []), "%s, rank %d" % (case, rank))
                self.check_dense(result, 3 * 9, where="%s, rank %d" % (case, rank))
                self.assertEqual(result["compacted"], 3 * 2, "the root's gather and reduce-scatter")
                self.assertTrue(result["padded"])
                self.assertEqual((result["published"], result["all_gathers"], result["reduce_scatters"]),
                                 ([7, 4], 3 * 7, 3 * 4))
                self.assertEqual(result["no_shard_plan"], 0, "NO_SHARD all-reduces: nothing to publish")

    def test_fsdp1_shard_grad_op_in_bf16_follows_the_recorded_order_and_names_lose_the_wrapper(self):
        """The blocks run 2, 0, 1: FSDP1 records that order in the first step and the table follows it.
        SHARD_GRAD_OP keeps parameters gathered for backward; reduced in param_dtype."""
        for rank, result in self.results("fsdp1_grad_op_bf16_recorded_order"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual((result["published"], result["all_gathers"], result["reduce_scatters"]),
                             ([4, 4], 3 * 4, 3 * 4))
            self.check_dense(result, 3 * 6, where="rank %d" % rank)
            self.assertEqual(result["compacted"], 3 * 2)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        print(json.dumps(rank_main(int(sys.argv[2]), int(sys.argv[3]))), flush=True)
        sys.stderr.flush()
        os._exit(0)  # no destructors of the kept process groups (see _KEEP)
    if not (os.environ.get("SIEVE_LIBRARY") or os.environ.get("LD_PRELOAD")):
        sys.exit("FAILED: set SIEVE_LIBRARY to the built libnccl-net-sieve.so, or LD_PRELOAD it")
    if not os.access(os.environ.get("SIEVE_PROXY_REPLAY", ""), os.X_OK):
        sys.exit("FAILED: set SIEVE_PROXY_REPLAY to the built proxy_shape_replay (tests/plugin/proxy)")
    main()
