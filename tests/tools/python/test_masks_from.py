# SPDX-License-Identifier: Apache-2.0
"""sieve.masks_from: the masks of torch.nn.utils.prune, torch.ao.pruning's sparsifier, a dict and a
safetensors file, found by one call, reach every face of Sieve and stay exact there:
- sieve.ddp under real DDP and sieve.fsdp under real FSDP2 (2 Gloo ranks on loopback): every loss and
  parameter bit-identical to the same trainer without Sieve (the sign of zero folded, as test_ddp.py);
- the preloaded proxy's binding (publish_pruned_model(masks=...)) publishes them on DDP's real buckets;
- apex ASP, emulated (gradients masked only inside optimizer.step): its pruned gradients are not zero
  when the all-reduce sees them, so Sieve drops nothing, every compacted bucket falls back, and the
  parameters are the default's.

Run it alone: python test_masks_from.py (exit 77: no torch with Gloo here)."""

import json
import logging
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
from fsdp_test_ranks import init_gloo, run_ranks, sieve_log  # noqa: E402

from suite import require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
from torch.ao.pruning import WeightNormSparsifier  # noqa: E402
import sieve  # noqa: E402
import sieve.fsdp as sieve_fsdp  # noqa: E402
from sieve import ddp as sieve_ddp  # noqa: E402

STEPS = 4


def model(seed=7):
    """Two linears pruned 2:4 by torch.ao.pruning's sparsifier (prepared: FakeSparsity holds the
    masks), one by torch.nn.utils.prune, one dense."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
    sparsifier.prepare(net, config=[{"tensor_fqn": "0.weight"}, {"tensor_fqn": "2.weight"}])
    sparsifier.step()
    prune.l1_unstructured(net[4], "weight", amount=0.7)
    return net


AO = ("0.parametrizations.weight.original", "2.parametrizations.weight.original")


def write_safetensors(path, masks):
    """A safetensors file of U8 masks, written by hand (the format: u64 header length, JSON header)."""
    header, blobs, offset = {}, [], 0
    for name, keep in masks.items():
        data = keep.to(torch.uint8).contiguous().numpy().tobytes()
        header[name] = {"dtype": "U8", "shape": list(keep.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check_found():
    """One process: what masks_from finds and refuses."""
    net = model()
    logging.getLogger("sieve").setLevel(logging.INFO)  # masks_from says what it found at INFO
    with sieve_log() as said:
        found = sieve.masks_from(net)
    logging.getLogger("sieve").setLevel(logging.NOTSET)
    assert sorted(found) == sorted(AO + ("4.weight_orig",)), sorted(found)
    assert found.sources == {AO[0]: "torch.ao.pruning", AO[1]: "torch.ao.pruning",
                             "4.weight_orig": "torch.nn.utils.prune"}, found.sources
    assert len(said) == 1 and "torch.ao.pruning: " + ", ".join(AO) in said[0], said
    assert int(found[AO[0]].sum()) == found[AO[0]].numel() // 2, "2:4 keeps half"
    # The gradients of what it names are zero where it prunes: what makes the faces exact.
    net(torch.randn(5, 12)).sum().backward()
    params = dict(net.named_parameters())
    for name, keep in found.items():
        assert bool(params[name].grad[~keep].eq(0).all()), name
    # A file or a dict may name the pruned tensor: resolved to the parameter behind it.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "masks.safetensors")
        write_safetensors(path, {"0.weight": found[AO[0]], "4.weight": found["4.weight_orig"],
                                 "6.weight": torch.ones(4, 16, dtype=torch.bool)})
        from_file = sieve.masks_from(net, path, quiet=True)
        assert from_file.sources["6.weight"] == "safetensors" and from_file.sources[AO[0]] == "torch.ao.pruning"
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 1)
        refused(lambda: sieve.masks_from(net, path, quiet=True), "do not hold its shape")
    refused(lambda: sieve.masks_from(net, {"4.weight": torch.ones(16, 32)}, quiet=True), "two different masks")
    refused(lambda: sieve.masks_from(net, {"9.weight": torch.ones(3)}, quiet=True), "no parameter of")
    refused(lambda: sieve.masks_from(net, {"6.weight": torch.ones(3)}, quiet=True), "has 3 elements")


def refused(call, words):
    try:
        call()
    except sieve.SieveError as error:
        assert words in str(error), "%s: %s" % (words, error)
        return
    raise AssertionError("not refused: %s" % words)


def bits(t):
    t = t.detach()
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return (t.float() + 0.0).view(torch.int32).clone()


def asp_mask(net, masks):
    """apex ASP's order, emulated: the optimizer's step first multiplies each pruned gradient by its
    mask, after the all-reduce has seen it dense (ASP prunes plain weights, whose gradients are dense)."""
    params = dict(net.named_parameters())
    with torch.no_grad():
        for name, keep in masks.items():
            params[name].grad.mul_(keep.to(params[name].grad.dtype))


def train(net, wrapped, asp=None):
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(wrapped(x), y)
        loss.backward()
        if asp is not None:
            asp_mask(net, asp)
        opt.step()
        if asp is not None:  # ASP keeps the pruned weights at zero
            with torch.no_grad():
                for name, keep in asp.items():
                    dict(net.named_parameters())[name].mul_(keep.to(torch.float32))
        losses.append(loss.detach().view(torch.int32).item())
    return losses, [bits(p) for p in net.parameters()]


def same(label, a, b):
    assert a[0] == b[0], "%s: losses differ" % label
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1])), "%s: a parameter differs" % label


def case_ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP
    net = model()
    dense = train(net, DDP(net, bucket_cap_mb=0.001))
    net = model()
    ddp = DDP(net, bucket_cap_mb=0.001)
    state = sieve_ddp.register(ddp, masks=sieve.masks_from(ddp, quiet=True))
    same("ddp", dense, train(net, ddp))
    assert state.stats["compacted"] > 0 and state.stats["fallback"] == 0, state.stats
    assert state.stats["elements_sent"] < 0.8 * state.stats["elements_dense"], state.stats
    # The preloaded proxy's binding: the same masks on DDP's real buckets (its commit needs a proxy).
    assert os.environ.get("SIEVE_LIBRARY"), "SIEVE_LIBRARY must name the built library (ctest sets it)"
    net = model()
    ddp = DDP(net, bucket_cap_mb=0.001, gradient_as_bucket_view=True)
    train(net, ddp)
    masks = sieve.masks_from(net, quiet=True)
    assert sieve.publish_pruned_model(net, masks=masks, commit_now=False) >= 2
    # One mask per bucket (gradient_as_bucket_view: every .grad views its bucket), pruning
    # exactly what the masks prune.
    buckets = {}
    for name in masks:
        grad = dict(net.named_parameters())[name].grad
        storage = grad.untyped_storage()
        buckets[storage.data_ptr()] = torch.tensor([], dtype=grad.dtype).set_(storage)
    pruned = sum(int((~keep).sum()) for keep in masks.values())
    published = [sieve.query(bucket) for bucket in buckets.values()]
    assert sum(q["count"] - q["kept"] for q in published) == pruned, (published, pruned)
    sieve.retract_all(net, commit_now=False)


def case_asp():
    """ASP's masks given as a dict: its pruned gradients are dense on the wire, so every compacted
    bucket's check fires and runs it as DDP's default: the default's parameters, nothing saved."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(3)

    def plain():
        torch.manual_seed(3)
        net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        keep = net[0].weight.abs() > net[0].weight.abs().median()
        with torch.no_grad():
            net[0].weight.mul_(keep)
        return net, {"0.weight": keep}

    net, masks = plain()
    dense = train(net, DDP(net, bucket_cap_mb=0.001), asp=masks)
    net, masks = plain()
    ddp = DDP(net, bucket_cap_mb=0.001)
    with sieve_log() as said:
        state = sieve_ddp.register(ddp, masks=sieve.masks_from(ddp, masks, quiet=True))
        result = train(net, ddp, asp=masks)
    same("asp", dense, result)
    assert state.stats["fallback"] >= STEPS, state.stats
    assert any("nonzero (or NaN) where its mask prunes" in m for m in said), said


def case_fsdp():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def build():
        net = model()
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for i in (0, 2, 4):
            fully_shard(net[i], mesh=mesh)
        fully_shard(net, mesh=mesh)
        return net

    net = build()
    dense = train(net, net)
    net = build()
    masks = sieve.masks_from(net, quiet=True)
    assert sorted(masks) == sorted(AO + ("4.weight_orig",)), sorted(masks)
    before = sieve_fsdp.stats()
    outcome = sieve_fsdp.compact(net, masks=masks)
    for label in ("0", "2", "4"):
        assert outcome[label] in ("compacted", "gradients only"), outcome
    same("fsdp", dense, train(net, net))
    after = sieve_fsdp.stats()
    assert after["compacted"] - before["compacted"] >= 3 * STEPS and after["fallback"] == before["fallback"], after


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        torch.set_num_threads(1)
        check_found()
        case_ddp()
        case_asp()
        case_fsdp()
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, 2, 420,
                     "OK: masks_from's masks (prune, ao.pruning, dict, safetensors) exact under sieve.ddp and "
                     "sieve.fsdp, published for the proxy; ASP's step-time masking runs dense, the default's result")


if __name__ == "__main__":
    sys.exit(main())
