# SPDX-License-Identifier: Apache-2.0
"""sieve.fsdp's compacted reduce-scatter at 4 Gloo ranks (4 processes on loopback, no FSDP): every
output shard bit-identical to Gloo's own reduce_scatter_tensor of the dense buffer, for segments of
odd and even length and a segment whose first elements are pruned. Gloo runs it as a ring all-reduce
whose chunks are 2 * ceil(S / 2) elements: with S odd, chunk c starts c elements into rank c's
segment, and those elements are summed in chunk c - 1's order; a compacted layout that does not keep
that (the first world - 1 elements travel, the length keeps S's parity) differs in the last bits.
Also in bfloat16, FSDP2's reduce_dtype=torch.bfloat16.

Run it alone: python test_sieve_fsdp_order.py (exit 77: no torch with Gloo here)."""

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
import sieve.fsdp as sieve_fsdp  # noqa: E402

WORLD = 4


def values(rank, n, seed):
    # Magnitudes over many binades: sums in another association differ in the last bits often.
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return (torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 3)).float()


def case(shapes, seed, head, dtype=torch.float32):
    """One group of parameters of these shapes, 80 % pruned (the same masks on every rank), the
    first world - 1 elements of every rank's segment kept (head True) or pruned, the gradients zero
    where pruned: Sieve's reduce-scatter against Gloo's on the same input, in dtype (FSDP2's
    reduce_dtype: float32, or bfloat16 with MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))."""
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(seed)
    parts = []
    for shape in shapes:
        keep = torch.rand(shape, generator=g) < 0.2
        parts.append(sieve_fsdp._masks.fsdp2_layout([shape], WORLD, [keep]).view(WORLD, -1))
    parts[0][:, :WORLD - 1] = head
    layout = sieve_fsdp._Layout(parts, WORLD, rank)
    keep = torch.cat(parts, dim=1).reshape(-1)
    segment = keep.numel() // WORLD
    flat = values(rank, keep.numel(), seed).masked_fill(~keep, 0.0).to(dtype)
    dense = torch.empty(segment, dtype=dtype)
    dist.reduce_scatter_tensor(dense, flat.clone())
    rs = sieve_fsdp.CompactReduceScatter("case", layout, dist.group.WORLD, None)
    rs.with_grad = tuple(range(len(parts)))
    out = torch.full((segment,), float("nan"), dtype=dtype)
    before = sieve_fsdp.stats()["compacted"]
    assert rs(out, flat, dist.group.WORLD, dist.ReduceOp.SUM) is None
    assert sieve_fsdp.stats()["compacted"] == before + 1, "the reduce-scatter did not compact"
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    differ = int((out.view(bits) != dense.view(bits)).sum())
    assert differ == 0, "segment %d (shapes %s, %s): %d of %d elements differ from Gloo's own" % (
        segment, shapes, dtype, differ, segment)
    return segment


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        segments = []
        for seed in range(8):  # compacted lengths of either parity
            segments.append(case([(64, 147), (10, 512), (10,)], seed, True))  # odd: 2352 + 1536 + 3
            segments.append(case([(64, 147), (64,), (10, 513), (13,)], seed, seed % 2 == 0))  # odd
        segments.append(case([(256, 256), (256,)], 3, True))  # even
        segments.append(case([(1001, 97)], 4, False))  # odd, 251 rows a rank, the last rank short
        for seed in range(4):  # FSDP2's bf16 reduce (reduce_dtype=torch.bfloat16)
            case([(64, 147), (10, 512), (10,)], seed, True, torch.bfloat16)
            case([(256, 256), (256,)], seed, seed % 2 == 0, torch.bfloat16)
        assert any(s % 2 for s in segments) and any(s % 2 == 0 for s in segments), segments
    finally:
        dist.destroy_process_group()


def main():
    return run_ranks(__file__, worker, WORLD, 240,
                     "OK: Sieve's compacted reduce-scatter bit-identical to Gloo's own at 4 ranks (odd and even "
                     "segments, float32 and bfloat16)")


if __name__ == "__main__":
    sys.exit(main())
