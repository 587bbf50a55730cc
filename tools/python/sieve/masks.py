# SPDX-License-Identifier: Apache-2.0
"""Masks on buffers: publish, retract, commit on a process group, query, counters; and the masks of
models pruned with torch.nn.utils.prune (DDP's buckets)."""

from __future__ import annotations

import ctypes
import logging
import operator
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from ._constants import (_COLLECTIVES, _COMMIT_ACTIVATED, _COMMIT_PENDING, _COMMIT_REFUSED, _COMMIT_UNION,
                         _DTYPE_BF16, _DTYPE_F16, _DTYPE_F32, _DTYPE_F64, _DTYPE_I8, _DTYPE_I32, _DTYPE_I64,
                         _DTYPE_U8, _ERR_INVALID, _ERR_UNSUPPORTED, _INT64_MIN, _TOKEN_NO_PROXY, _TOKEN_WORDS)
from ._library import SieveError, _CommitResult, _MaskInfo, _Stats, _check, _present, library

if TYPE_CHECKING:
    import torch
    import torch.distributed

# Operational notices (a refused commit) go to the "sieve" logger, not to warnings: they report a state
# of the job, which every rank also gets back as a return value, not a misuse of the API.
_log = logging.getLogger("sieve")

# Without Sieve in the process (_library._present() is None: a job rolled back) every call below still
# checks its arguments, then does nothing: publishes return mask id 0, commit() still sends its token
# (a rank without Sieve must not leave its peers waiting in the vote) and refuses, stats() reads zeros.

# What the binding published, by mask id: the tensor, held alive while its mask is staged or may be
# active on a communicator; and the ids retracted but not yet released by a commit.
_held = {}
_retiring = set()


def _hold(mask_id, tensor):
    if tensor is not None:
        _held[mask_id] = tensor


def _release_retired():
    """Drops the tensors whose retracted masks no agreed table holds any more (after commits)."""
    if _present() is None:
        return
    for mask_id in list(_retiring):
        released = ctypes.c_int(0)
        if library().sieve_mask_released(ctypes.c_uint64(mask_id), ctypes.byref(released)) != 0 or released.value:
            _retiring.discard(mask_id)
            _held.pop(mask_id, None)


def _retract_id(mask_id):
    """Unstages a mask (it may already be gone: replaced by a later publish); its tensor stays held
    until a commit releases it."""
    lib = _present()
    if lib is not None:
        lib.sieve_mask_retract_id(ctypes.c_uint64(mask_id))
        _retiring.add(mask_id)


def _dtype_code_of(dtype):
    import torch
    codes = {torch.float32: _DTYPE_F32, torch.float16: _DTYPE_F16, torch.bfloat16: _DTYPE_BF16,
             torch.float64: _DTYPE_F64, torch.int8: _DTYPE_I8, torch.uint8: _DTYPE_U8, torch.int32: _DTYPE_I32,
             torch.int64: _DTYPE_I64}
    if dtype not in codes:
        raise SieveError(_ERR_UNSUPPORTED, "unsupported tensor dtype %s" % dtype)
    return codes[dtype]


def _dtype_code(tensor):
    return _dtype_code_of(tensor.dtype)


def _tensor(value, what):
    """value, which must be a torch.Tensor: anything else (a list, a NumPy array) is a SieveError that
    says so, not an AttributeError from deep inside."""
    import torch
    if not isinstance(value, torch.Tensor):
        raise SieveError(_ERR_INVALID, "%s must be a torch.Tensor, not %s" % (what, type(value).__name__))
    return value


_UINT64_LIMIT = 1 << 64


def _count(value, what):
    """value as a Python int that fits sieve.h's uint64_t/size_t: ctypes would wrap 2**64 + k to k, and
    -1 to 2**64 - 1, silently, so both are refused, as are floats and other non-integers."""
    try:
        number = operator.index(value)
    except TypeError:
        raise SieveError(_ERR_INVALID, "%s must be an integer, not %r" % (what, value)) from None
    if not 0 <= number < _UINT64_LIMIT:
        raise SieveError(_ERR_INVALID, "%s is %d: it counts elements, from 0 to 2**64 - 1" % (what, number))
    return number


def _buffer(tensor):
    tensor = _tensor(tensor, "the tensor")
    if not tensor.is_contiguous():
        raise SieveError(_ERR_INVALID, "the tensor must be contiguous (a mask describes consecutive elements)")
    if tensor.numel() == 0:
        raise SieveError(_ERR_INVALID, "the tensor has no elements")
    return tensor.data_ptr(), tensor.numel(), _dtype_code(tensor)


def _packbits(keep: torch.Tensor) -> bytes:
    """keep: a tensor of any dtype (nonzero = kept) -> LSB-first bitmap bytes, packed by torch itself."""
    import torch
    flat = keep.detach().reshape(-1).ne(0).to("cpu", torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    packed = (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)
    try:
        return packed.numpy().tobytes()
    except RuntimeError:  # torch built without numpy
        return bytes(packed.tolist())


def _publish_bits(address: int, count: int, dtype: int, bits: bytes, owner: Any = None) -> int:
    """Publishes an LSB-first bitmap for count elements of dtype at address; owner (a tensor) is kept
    alive until a commit has released the mask. A mask it replaces is retired the same way."""
    if _present() is None:
        return 0
    previous = _id_at(address)
    mask_id = ctypes.c_uint64(0)
    _check(library().sieve_mask_publish_for(None, ctypes.c_void_p(address), count, dtype, bits, len(bits),
                                            ctypes.byref(mask_id)))
    if previous:
        _retiring.add(previous)
    _hold(mask_id.value, owner)
    return mask_id.value


def _id_at(address):
    info = _MaskInfo(size=ctypes.sizeof(_MaskInfo))
    if library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)) == 0:
        return info.mask_id
    return 0


def publish_mask(tensor: torch.Tensor, keep: torch.Tensor) -> int:
    """Publishes (stages) which elements of `tensor` are kept (keep: same number of elements, nonzero =
    kept); commit() makes it take effect. Returns the mask id. The tensor is kept alive until a
    commit after its retraction. The address is what counts: publish the buffer NCCL will reduce."""
    address, count, dtype = _buffer(tensor)
    keep = _tensor(keep, "keep")
    if keep.numel() != count:
        raise SieveError(_ERR_INVALID, "mask has %d elements, the tensor %d" % (keep.numel(), count))
    return _publish_bits(address, count, dtype, _packbits(keep), owner=tensor)


def publish_ranges(tensor: torch.Tensor, ranges: Iterable[tuple[int, int]]) -> int:
    """Publishes kept elements as (start, length) pairs. Returns the mask id."""
    address, count, dtype = _buffer(tensor)
    try:
        pairs = [tuple(pair) for pair in ranges]
    except TypeError:
        raise SieveError(_ERR_INVALID,
                         "publish_ranges: ranges must be (start, length) pairs, not %r" % (ranges,)) from None
    checked = []
    for k, pair in enumerate(pairs):
        if len(pair) != 2:
            raise SieveError(_ERR_INVALID, "publish_ranges: range %d is %r, not a (start, length) pair" % (k, pair))
        checked.append((_count(pair[0], "publish_ranges: range %d's start" % k),
                        _count(pair[1], "publish_ranges: range %d's length" % k)))
    n = len(checked)
    starts = (ctypes.c_uint64 * max(n, 1))(*[s for s, _ in checked])
    lengths = (ctypes.c_uint64 * max(n, 1))(*[l for _, l in checked])
    if _present() is None:
        return 0
    previous = _id_at(address)
    mask_id = ctypes.c_uint64(0)
    _check(library().sieve_mask_publish_ranges_for(None, ctypes.c_void_p(address), count, dtype, starts, lengths, n,
                                                   ctypes.byref(mask_id)))
    if previous:
        _retiring.add(previous)
    _hold(mask_id.value, tensor)
    return mask_id.value


def _publish_collective_bits(kind: str, count: int, dtype: int, bits: bytes) -> int:
    """Stages an LSB-first bitmap for every `kind` collective ("reduce_scatter" or "all_gather") moving
    count elements of dtype (a sieve.h dtype code) across all ranks. Returns the mask id. No tensor is
    held: such a mask names no buffer."""
    if kind not in _COLLECTIVES:
        raise SieveError(_ERR_INVALID, "unknown collective %r (reduce_scatter or all_gather)" % (kind,))
    if _present() is None:
        return 0
    mask_id = ctypes.c_uint64(0)
    _check(library().sieve_collective_mask_publish_for(None, _COLLECTIVES[kind], count, dtype, bits, len(bits),
                                                       ctypes.byref(mask_id)))
    return mask_id.value


def publish_collective(kind: str, keep: torch.Tensor, dtype: torch.dtype) -> int:
    """Publishes (stages) the mask of every `kind` collective ("reduce_scatter" or "all_gather") that
    moves keep.numel() elements of `dtype` (a torch dtype) across all ranks, whatever its buffers: keep
    covers the whole buffer, rank 0's part first (nonzero = kept). For collectives whose buffers are new
    every step (FSDP); several masks of one shape are taken in publish order, so publish them in the
    order the job issues them (publish_fsdp does). commit() makes it take effect; retract it with
    retract_id(). Returns the mask id."""
    import torch
    if not isinstance(keep, torch.Tensor) or keep.numel() == 0:
        raise SieveError(_ERR_INVALID, "keep must be a tensor with at least one element")
    return _publish_collective_bits(kind, keep.numel(), _dtype_code_of(dtype), _packbits(keep))


def retract_id(mask_id: int) -> None:
    """Unstages the mask with this id (as publish_mask, publish_ranges and publish_collective return
    it); like a publish, it takes effect at the next commit. A tensor published with it stays held
    until a commit releases the mask."""
    mask_id = _count(mask_id, "retract_id: the mask id")
    if _present() is None:
        return
    _check(library().sieve_mask_retract_id(ctypes.c_uint64(mask_id)))
    _retiring.add(mask_id)


def retract(tensor: torch.Tensor) -> None:
    """Unstages the mask published for `tensor` (its exact data address). Like a publish, it takes
    effect at the next commit on each group; the binding holds the tensor until then."""
    tensor = _tensor(tensor, "the tensor")
    if _present() is None:
        return
    mask_id = _id_at(tensor.data_ptr())
    _check(library().sieve_mask_retract(ctypes.c_void_p(tensor.data_ptr())))
    _retiring.add(mask_id)


def _token_device(group):
    import torch
    import torch.distributed as dist
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def commit(group: torch.distributed.ProcessGroup | None = None, union: bool = False) -> dict[str, Any]:
    """Commits what is staged on a torch.distributed process group (None: the default group). A
    collective: every rank of the group calls it at the same point, like an all-reduce. It travels as
    one all-reduce of a small token, which the collective proxy runs as the vote; where no proxy
    intercepts it (not LD_PRELOADed, or a backend other than NCCL), every rank refuses. With
    union=True the ranks' masks may differ and every rank compacts on their OR (PruneX).

    Returns dict(state="activated"|"refused"|"pending", commit, masks, compacting, reason), the same on
    every rank. It never raises for a refusal: a rank that raised where its peers went on would hang them.
    """
    import torch
    import torch.distributed as dist
    flags = _COMMIT_UNION if union else 0
    words = [_INT64_MIN] * _TOKEN_WORDS
    words[4] = _TOKEN_NO_PROXY
    token = torch.tensor(words, dtype=torch.int64, device=_token_device(group))
    lib, armed = _present(), False
    try:
        if lib is not None:
            _check(lib.sieve_commit_arm(ctypes.c_void_p(token.data_ptr()), flags))
            armed = True
    except SieveError as error:  # no proxy here: the token still goes out, with its "no proxy" vote
        _log.warning("sieve.commit: %s; every rank of the group refuses this commit", error)
    dist.all_reduce(token, op=dist.ReduceOp.MAX, group=group)
    if lib is not None:  # without a proxy no table holds a retracted mask: its tensor goes at once
        _release_retired()
    result = _CommitResult(size=ctypes.sizeof(_CommitResult))
    if not armed or lib.sieve_commit_outcome(ctypes.c_void_p(token.data_ptr()), ctypes.byref(result)) != 0:
        reason = lib.sieve_last_error().decode() if armed else "no collective proxy in this process"
        if lib is not None:  # without Sieve the one warning _present() gave covers every commit
            _log.warning("sieve.commit: %s", reason)
        return {"state": "refused", "commit": 0, "masks": 0, "compacting": 0, "reason": reason}
    states = {_COMMIT_REFUSED: "refused", _COMMIT_ACTIVATED: "activated", _COMMIT_PENDING: "pending"}
    return {"state": states.get(result.state, "refused"), "commit": result.commit, "masks": result.masks,
            "compacting": result.compacting, "reason": result.reason.decode()}


def query(tensor: torch.Tensor) -> dict[str, int]:
    """What is published for `tensor`: dict(mask_id, count, kept, hash, dtype)."""
    tensor = _tensor(tensor, "the tensor")
    info = _MaskInfo(size=ctypes.sizeof(_MaskInfo))
    if _present() is None:
        return {name: 0 for name in ("mask_id", "count", "kept", "hash", "dtype")}
    _check(library().sieve_mask_query(ctypes.c_void_p(tensor.data_ptr()), ctypes.byref(info)))
    return {name: getattr(info, name) for name in ("mask_id", "count", "kept", "hash", "dtype")}


def stats() -> dict[str, int]:
    """The process's counters as a dict (sieve_stats_t's fields); all zero without Sieve in the process."""
    s = _Stats(size=ctypes.sizeof(_Stats))
    if _present() is not None:
        _check(library().sieve_stats_get(ctypes.byref(s)))
    return {name: getattr(s, name) for name, _ in _Stats._fields_[1:]}


def _pruned_parameters(model: torch.nn.Module, masks: Mapping[str, torch.Tensor] | None = None
                       ) -> Iterator[tuple[str, torch.nn.Parameter, torch.Tensor]]:
    """(name, parameter, mask) for every torch.nn.utils.prune reparametrization in the model (the
    trainable tensor is <name>_orig and the mask the buffer <name>_mask) and every masks[name] (a
    parameter name, as sieve.masks_from gives them), which wins over prune's buffer."""
    masks = dict(masks or {})
    params = dict(model.named_parameters())
    unknown = sorted(set(masks) - set(params))
    if unknown:
        raise SieveError(_ERR_INVALID, "masks names %s, which the model has no parameter of" % ", ".join(unknown))
    for module_name, module in model.named_modules():
        buffers = dict(module.named_buffers(recurse=False))
        for param_name, param in module.named_parameters(recurse=False):
            name = ("%s.%s" % (module_name, param_name)).lstrip(".")
            if name in masks:
                yield name, param, masks.pop(name)
            elif param_name.endswith("_orig"):
                mask = buffers.get(param_name[:-len("_orig")] + "_mask")
                if mask is not None:
                    yield name, param, mask


# Mask ids publish_pruned_model published, per model: republishing (buckets moved, masks changed)
# first retracts them.
_published_by_model = {}


# Mask ids publish_fsdp published, and the process groups it committed on, per model (retract_all
# retracts them too).
_fsdp_published = {}


def _storage_extent(tensor):
    """(address, bytes) of the whole storage a tensor views (torch >= 2.0 and older)."""
    if hasattr(tensor, "untyped_storage"):
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    storage = tensor.storage()
    return storage.data_ptr(), storage.size() * tensor.element_size()


def _storage_masks(pruned):
    """One mask per gradient storage: with DDP's gradient_as_bucket_view every .grad is a view into the
    flat bucket NCCL reduces, so the buffer to publish is the whole bucket. Elements no pruned
    gradient covers (unpruned parameters, alignment gaps) are kept, which is always exact."""
    import torch
    storages = {}
    for name, param, mask in pruned:
        grad = param.grad
        if not grad.is_contiguous():
            raise SieveError(_ERR_INVALID, "the gradient of %s is not contiguous" % name)
        if mask.numel() != grad.numel():
            raise SieveError(_ERR_INVALID, "the mask of %s has %d elements, its gradient %d" % (
                name, mask.numel(), grad.numel()))
        address, nbytes = _storage_extent(grad)
        entry = storages.setdefault(address, {
            "dtype": grad.dtype, "count": nbytes // grad.element_size(), "grads": [], "parts": []})
        if entry["dtype"] != grad.dtype:
            raise SieveError(_ERR_INVALID, "gradients of different dtypes share one storage (%s)" % name)
        entry["grads"].append(grad)
        entry["parts"].append((grad.storage_offset(), mask))
    for address, entry in storages.items():
        keep = torch.ones(entry["count"], dtype=torch.bool)
        for offset, mask in entry["parts"]:
            keep[offset:offset + mask.numel()] = mask.detach().reshape(-1).ne(0).cpu()
        yield address, entry, keep


def publish_pruned_model(model: torch.nn.Module, require_grads: bool = True, commit_now: bool = True,
                         union: bool = False, group: torch.distributed.ProcessGroup | None = None,
                         masks: Mapping[str, torch.Tensor] | None = None) -> int:
    """Publishes the masks of every parameter pruned with torch.nn.utils.prune, and `masks` ({parameter
    name: keep}, as sieve.masks_from(model) finds them: torch.ao.pruning's too), on the buffers that
    hold their gradients (the gradient of a pruned weight is exactly zero where the mask prunes), then
    commits on `group` (commit_now=False leaves the commit to the caller). Returns the number of masks
    published.

    For DDP, pass the wrapped module (ddp.module) and construct DDP with gradient_as_bucket_view=True:
    then each bucket NCCL all-reduces gets one mask, the union of its gradients' masks (unpruned
    parameters stay dense). Call it on every rank at the same point, after the *second* backward pass
    (DDP rebuilds its buckets once during the second iteration, which moves every gradient), and again
    whenever a mask changes or buckets move; it first retracts what it published for this model
    before. The buckets are held alive until a commit releases their masks. Without
    gradient_as_bucket_view DDP copies gradients into buckets no mask covers, and the proxy runs dense
    (it logs the near miss).
    """
    pruned = list(_pruned_parameters(model, masks))
    if require_grads:
        for name, param, _ in pruned:
            if param.grad is None:
                raise SieveError(_ERR_INVALID, "%s has no gradient yet: publish after the first backward pass" % name)
    for mask_id in _published_by_model.pop(id(model), []):
        _retract_id(mask_id)
    ids = []
    for address, entry, keep in _storage_masks([p for p in pruned if p[1].grad is not None]):
        dtype = _dtype_code(entry["grads"][0])
        mask_id = _publish_bits(address, entry["count"], dtype, _packbits(keep), owner=entry["grads"])
        if mask_id:  # 0: no Sieve in this process, nothing published
            ids.append(mask_id)
    _published_by_model[id(model)] = ids
    if commit_now:
        commit(group=group, union=union)
    return len(ids)


def retract_all(model: torch.nn.Module, commit_now: bool = True,
                group: torch.distributed.ProcessGroup | None = None) -> None:
    """Retracts the masks publish_pruned_model and publish_fsdp published for this model, then commits
    on `group` (None: the default group, and the groups publish_fsdp committed on)."""
    for mask_id in _published_by_model.pop(id(model), []):
        _retract_id(mask_id)
    fsdp = _fsdp_published.pop(id(model), None)
    for mask_id in fsdp["ids"] if fsdp else ():
        _retract_id(mask_id)
    if commit_now:
        targets = [group] if group is not None or not fsdp else fsdp["groups"]
        for target in targets or [None]:
            commit(group=target)
