# SPDX-License-Identifier: Apache-2.0
"""FSDP's flat buffers: where each parameter's kept elements fall in every rank's part of an FSDP2 or
FSDP1 collective. Pure functions of shapes and masks (no torch.distributed), used by fsdp_masks to
publish the preloaded proxy's collective masks and by anyone checking a layout by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ._constants import _ERR_INVALID
from ._library import SieveError

if TYPE_CHECKING:
    import torch

# --- FSDP: the bitmaps of its collectives ------------------------------------------------------
#
# FSDP all-gathers each parameter group into a buffer and reduce-scatters its gradients out of one,
# both allocated afresh every step, so their masks name the collective (docs/DESIGN.md, "Masks that
# name a collective"): kind, the whole buffer's element count (every rank's part, rank 0's first) and
# dtype. The functions below compute that bitmap from the full masks; every rank computes every
# rank's part, so all ranks publish the same table.


def _positive_world_size(world_size):
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise SieveError(_ERR_INVALID, "world_size must be a positive int, not %r" % (world_size,))
    return world_size


def _keep_of(keep, shape, what):
    """keep as a CPU bool tensor of exactly `shape` (None: everything kept)."""
    import torch
    shape = torch.Size(shape)
    if keep is None:
        return torch.ones(shape, dtype=torch.bool)
    if not isinstance(keep, torch.Tensor):
        raise SieveError(_ERR_INVALID, "the mask of %s is a %s, not a tensor" % (what, type(keep).__name__))
    if keep.shape != shape:
        raise SieveError(_ERR_INVALID, "the mask of %s has shape %s, the parameter %s" % (
            what, tuple(keep.shape), tuple(shape)))
    return keep.detach().to("cpu").ne(0)


def _rank_parts(keep, world_size, dim, what):
    """(world_size, padded shard numel): row r is rank r's shard of keep, flattened, as FSDP2 cuts it.

    Dim 0 (the default): torch.chunk's split, ceil(rows / world_size) rows a rank, the last ranks
    short or empty, each padded with False to the first chunk's size (FSDP2's _chunk_with_empty and
    its pre-padded sharded parameter). Another dim: FSDP2 allows only an even split there."""
    import torch
    if keep.dim() == 0:
        raise SieveError(_ERR_INVALID, "%s is a 0-dim tensor: FSDP shards along a dimension" % what)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -keep.dim() <= dim < keep.dim():
        raise SieveError(_ERR_INVALID, "%s has %d dims, no shard dim %r" % (what, keep.dim(), dim))
    dim %= keep.dim()
    size = keep.shape[dim]
    if dim != 0:
        if size % world_size:
            raise SieveError(_ERR_INVALID, "%s: FSDP2 shards dim %d only evenly, and %d rows do not divide among "
                                           "%d ranks" % (what, dim, size, world_size))
        return torch.stack([chunk.reshape(-1) for chunk in keep.chunk(world_size, dim=dim)])
    rows = -(-size // world_size)
    padded = keep.new_zeros((rows * world_size,) + tuple(keep.shape[1:]))
    padded[:size] = keep
    return padded.reshape(world_size, rows * (keep.numel() // size if size else 0))


def fsdp2_layout(shapes: Sequence[Sequence[int]], world_size: int, keeps: Sequence[torch.Tensor | None] | None = None,
                 shard_dims: Sequence[int] | None = None) -> torch.Tensor:
    """The bitmap of one FSDP2 (fully_shard) collective over one parameter group: a flat torch.bool
    tensor of world_size x (the sum of the parameters' padded shard sizes) elements, rank 0's part
    first, True = kept. That is the buffer both the group's all-gather (its output) and its
    reduce-scatter (its input) move.

    What it assumes of FSDP2 (torch/distributed/fsdp/_fully_shard, as PyTorch 2.11 has it): each
    parameter is cut along dim 0 as torch.chunk cuts it (ceil(rows / world_size) rows a rank, the last
    ranks short or empty) and every rank's chunk is padded with zeros to the first chunk's size
    (_fsdp_param.py); a Shard(dim) placement with dim > 0 cuts that dim evenly instead. Rank r's part
    of the buffer is its padded chunk of every parameter, flattened, in group order (the all-gather's
    copy-in; the reduce-scatter's chunk_cat of the gradients). Padding is never read back and is zero
    in both collectives, so it is pruned.

    shapes: the parameters' full (unsharded) shapes in group order; keeps: one mask each (nonzero =
    kept, the parameter's shape) or None, or None for all kept; shard_dims: each one's shard dim (0).
    """
    import torch
    world_size = _positive_world_size(world_size)
    shapes = list(shapes)
    if not shapes:
        raise SieveError(_ERR_INVALID, "a parameter group has at least one parameter")
    for given, name in ((keeps, "keeps"), (shard_dims, "shard_dims")):
        if given is not None and len(given) != len(shapes):
            raise SieveError(_ERR_INVALID, "%d shapes but %d %s" % (len(shapes), len(given), name))
    parts = []
    for i, shape in enumerate(shapes):
        what = "parameter %d" % i
        keep = _keep_of(keeps[i] if keeps is not None else None, shape, what)
        parts.append(_rank_parts(keep, world_size, shard_dims[i] if shard_dims is not None else 0, what))
    return torch.cat(parts, dim=1).reshape(-1)


def fsdp1_layout(numels: Sequence[int], world_size: int, keeps: Sequence[torch.Tensor | None] | None = None,
                 padding: Sequence[bool] | None = None, keep_padding: bool = False) -> torch.Tensor:
    """The bitmap of one FSDP1 (FullyShardedDataParallel) collective over one FlatParameter: a flat
    torch.bool tensor of world_size x ceil(total / world_size) elements, True = kept.

    What it assumes of FSDP1 (torch/distributed/fsdp/_flat_param.py): the FlatParameter is its
    parameters flattened and concatenated in order, with alignment padding entries between them
    (use_orig_params: _numels_with_padding, _is_padding_mask), then padded with zeros at the end to a
    multiple of world_size; rank r holds the r-th contiguous chunk. So the buffer both the all-gather
    (the padded unsharded flat parameter) and the reduce-scatter (the padded unsharded flat gradient)
    move is the flat parameter itself.

    numels: every entry's element count, padding entries included; padding: one bool per entry (None:
    no alignment padding); keeps: one mask per non-padding entry, in order (nonzero = kept, numel
    elements) or None, or None for all kept. keep_padding: alignment padding holds FSDP's filler value
    (not zero) in the parameter, so an all-gather must keep it; a gradient is zero there, so a
    reduce-scatter prunes it. The padding at the end is zero in both and is always pruned.
    """
    import torch
    world_size = _positive_world_size(world_size)
    numels = [int(n) for n in numels]
    padding = list(padding) if padding is not None else [False] * len(numels)
    if len(padding) != len(numels):
        raise SieveError(_ERR_INVALID, "%d entries but %d padding flags" % (len(numels), len(padding)))
    params = sum(1 for p in padding if not p)
    if keeps is not None and len(keeps) != params:
        raise SieveError(_ERR_INVALID, "%d parameters but %d keeps" % (params, len(keeps)))
    if not numels or any(n < 0 for n in numels) or sum(numels) == 0:
        raise SieveError(_ERR_INVALID, "a FlatParameter has elements, and no entry has fewer than 0")
    segments, index = [], 0
    for numel, is_padding in zip(numels, padding):
        if is_padding:
            segments.append(torch.full((numel,), bool(keep_padding)))
            continue
        keep = keeps[index] if keeps is not None else None
        what = "parameter %d" % index
        if keep is not None and (not isinstance(keep, torch.Tensor) or keep.numel() != numel):
            raise SieveError(_ERR_INVALID, "the mask of %s has %s elements, the parameter %d" % (
                what, keep.numel() if isinstance(keep, torch.Tensor) else "no", numel))
        segments.append(_keep_of(keep, keep.shape if keep is not None else (numel,), what).reshape(-1))
        index += 1
    flat = torch.cat(segments)
    total = -(-flat.numel() // world_size) * world_size
    return torch.cat([flat, flat.new_zeros(total - flat.numel())])
