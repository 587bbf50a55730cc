# SPDX-License-Identifier: Apache-2.0
"""A DDP communication hook that all-reduces only the kept elements of each gradient bucket.

    state = sieve.ddp.CompactState(ddp_model)              # every rank, after pruning
    ddp_model.register_comm_hook(state, sieve.ddp.compact_hook)

Needs no LD_PRELOAD and works on any backend (NCCL on GPUs, Gloo on CPUs): the hook itself gathers
each bucket's kept elements into a compact buffer, all-reduces that on the bucket's process group and
scatters the sums back, exact zero where the mask prunes. The masks are torch.nn.utils.prune's
(<name>_orig parameters with their <name>_mask buffers) and any `masks` given, {parameter name:
keep}, whose gradients the caller promises to be zero outside keep.

Masks are found by bucket: DDP's bucket index and the names of its parameters, never an address, so
they follow DDP's bucket rebuild after the first step. Before a bucket is compacted, its ranks agree
on it with a vote shaped as the collective proxy's commit (plugin/proxy/agreement.h): six int64 words,
the subject (a hash of the bucket's structure and mask) and its complement, the settings (world size,
wire dtype) and their complement, the worst refusal, a reserved word, all-reduced with max on the
bucket's process group. Every rank reads the same verdict from that one collective; a bucket whose
ranks did not agree, or that has nothing pruned, runs exactly as DDP's default hook (divide by the
world size, all-reduce), on every rank. A vote happens once per bucket per mask epoch: when DDP shows
a bucket (index, parameters) not yet decided, which DDP makes equal on every rank, and again after
update_masks(), which every rank calls at the same point.

Exactness is checked on every call, not trusted: each rank counts the nonzero (or NaN, or inf)
elements of the bucket where the mask prunes (a regrown weight without update_masks(), a NaN that
prune's grad x mask keeps, a gradient term outside the mask, as weight decay in the loss gives) and
sends 0 or 1 as one more element of the same compacted all-reduce: no extra collective, no extra
round trip; the sum is a count no larger than the world size, exact in any float dtype, and an
element of its own, which no NaN among the gradients reaches. Where the sum is not zero, every rank
sees it and that bucket runs the default's division and all-reduce on the untouched buffer instead
(on a second process group of the same ranks, so the fallback, issued from the all-reduce's callback,
never races the hook's own all-reduces; buckets settle in issue order, so every rank issues its
fallbacks in the same order), counted in stats["fallback"] and said once through the "sieve" logger.
The check costs, per call, |x| into a scratch buffer and a count of its nonzero integer bits over
the bucket and over its kept elements (measured on the host: docs/PERFORMANCE.md). On a CUDA bucket
the flag is read on the host in the all-reduce future's callback; NCCL completes a future when the
collective is enqueued, so that read waits for the bucket's all-reduce before the backward goes on
(not measured: no GPU here).

Otherwise the kept elements are summed by the same all-reduce as the dense bucket's; at 2 ranks every
sum is bit-identical to the default hook's (a + b = b + a), with one stated exception, the sign of
zero: a pruned element comes back as +0.0 where the default gives -0.0 when every rank's gradient
there is -0.0 (a pruned product's zero keeps the sign of its factor). The values are equal, every
sum, product and comparison sees no difference; an SGD momentum buffer or a parameter updated from
it may then hold +0.0 where the default's holds -0.0. Reproducing the sign would need one bit per
pruned element from every rank on the wire (1/32 of a dense fp32 bucket per pruned element). With
more ranks the backend may sum in another order for a shorter buffer (the same reduction-order noise
as another bucket size).

wire_dtype=torch.bfloat16 (or torch.float16) is LOSSY: the compact buffer travels in 16 bits, as
PyTorch's bf16_compress_hook sends dense buckets (cast, divide, all-reduce, cast back), so compaction
and 16-bit stack. Buckets without an agreed mask still run the default, full-precision hook.

Gather and scatter (sieve._kernels): on a GPU, Sieve's own CUDA kernels where the library in reach
was built with CUDA (sieve_compact_gather / sieve_compact_scatter); on the host, the library's CPU
kernels (sieve_compact_gather_host / _scatter_host, with torch's thread count); torch's own
index_select / index_copy_ only where no library is in reach. On the host, where gather and scatter are the
CPU's own work, a bucket with more than piece_elements kept elements goes out in pieces of that many,
each all-reduced as soon as it is gathered and scattered back as soon as its sum arrives, so that the
copies overlap the wire instead of adding to it. By default (piece_elements=None) only on a group of
2 ranks, where a sum has no order and the pieces are bit-identical to one all-reduce, in pieces of
PIECE_ELEMENTS; on larger groups each piece is its own ring and sums in another order (the noise of
another bucket size), so there pieces are used only when piece_elements is given. Each piece carries
the flag of the part of the bucket it answers for (from its first kept element to the next piece's)
and falls back alone.
"""

import hashlib
import logging
import struct
import threading

__all__ = ["CompactState", "compact_hook", "register"]

# plugin/proxy/agreement.h: the refusals a vote carries in its fifth word.
_REFUSAL_NONE, _REFUSAL_COULD_NOT_PREPARE = 0, 1
_HOOK_VERSION = 3  # part of the settings: ranks running different hook logic never compact together
# A host bucket's compact buffer goes out in pieces of this many kept elements (1 MiB of float32):
# large enough that a piece's all-reduce is mostly wire time, small enough that gathering the next
# and scattering the last overlap it.
PIECE_ELEMENTS = 1 << 18


def _int64(digest):
    return struct.unpack("<q", digest[:8])[0]


def _hash(*parts):
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        data = part if isinstance(part, bytes) else repr(part).encode()
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return _int64(h.digest())


def _vote_device(group):
    import torch
    import torch.distributed as dist
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _agree(group, subject, settings, refusal):
    """The vote: one all-reduce (max) on the group. True when every rank voted the same subject and
    settings and none refused; the same answer on every rank."""
    import torch
    import torch.distributed as dist
    words = torch.tensor([subject, ~subject, settings, ~settings, refusal, 0], dtype=torch.int64,
                         device=_vote_device(group))
    dist.all_reduce(words, op=dist.ReduceOp.MAX, group=group)
    got = words.tolist()
    return got[0] == subject and got[1] == ~subject and got[2] == settings and got[3] == ~settings and got[4] == 0


class _Plan:
    """A bucket's agreed compaction (_kernels.Compaction: its index, runs or device mask, computed once)."""

    def __init__(self, keep):
        from ._kernels import Compaction
        self.compaction = Compaction(keep)
        self.kept = self.compaction.kept
        self._wire = {}  # (device, dtype, pieces) -> the buffer the pieces and their flags travel in, reused

    def wire(self, like, pieces):
        """kept + pieces elements like `like`: each piece's kept elements followed by its flag."""
        key = (like.device, like.dtype, pieces)
        wire = self._wire.get(key)
        if wire is None:
            wire = like.new_empty(self.kept + pieces)
            self._wire[key] = wire
        return wire


class CompactState:
    """What compact_hook needs: the masks, the process group, the wire dtype and the agreed plans.

    model: the DDP-wrapped model or its module (parameter names as module.named_parameters() gives
    them). process_group: the group DDP reduces on (None: the default group). masks: {name: keep}
    besides torch.nn.utils.prune's. wire_dtype: None (exact) or torch.bfloat16 / torch.float16
    (lossy). piece_elements: a host bucket's piece size (None: PIECE_ELEMENTS on a group of 2 ranks,
    one piece on larger ones; the module's doc says why). stats counts what the hook did on this
    rank: buckets compacted (sent compacted, whatever their check said) and dense (no agreed mask),
    fallback (compacted buckets, or pieces of one, that a rank's check sent again as the default's
    dense all-reduce), elements sent (flags and every fallback's dense elements included) and the
    elements the default hook would have sent, the votes, and the pieces of host buckets sent in
    pieces."""

    def __init__(self, model, process_group=None, masks=None, wire_dtype=None, piece_elements=None):
        import torch
        if wire_dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError("wire_dtype must be None, torch.bfloat16 or torch.float16, not %r" % (wire_dtype,))
        if piece_elements is not None and int(piece_elements) < 1:
            raise ValueError("piece_elements must be at least 1, not %r" % (piece_elements,))
        self.piece_elements = None if piece_elements is None else int(piece_elements)
        self.module = getattr(model, "module", model)
        self.process_group = process_group
        self.wire_dtype = wire_dtype
        self._names = {}
        for name, param in self.module.named_parameters():
            self._names.setdefault(param, name)  # a shared parameter is DDP's once, by its first name
        self._given = dict(masks or {})
        unknown = sorted(set(self._given) - set(self._names.values()))
        if unknown:
            raise ValueError("masks names %s, which the model has no parameter of" % ", ".join(unknown))
        self._plans = {}  # (bucket index, parameter names) -> _Plan, or None for dense
        self.epoch = 0
        self.stats = {"compacted": 0, "dense": 0, "fallback": 0, "elements_sent": 0, "elements_dense": 0, "votes": 0,
                      "agreed": 0, "pieces": 0}
        # The checks settle on Gloo's threads (a future's callbacks) while the hook counts on
        # autograd's: one lock over stats.
        self._lock = threading.Lock()
        # The last settled piece of any bucket: each piece settles after the one issued before it, so
        # every rank issues its fallbacks in the same order (see _settle).
        self._last = None
        self._fallback_groups = {}  # process group -> the group its fallbacks run on
        self._warned = False
        self._scratch = {}  # (device, dtype) -> a buffer for _nonzero, as large as the largest bucket

    def _nonzero(self, tensor):
        """How many elements of the 1-D float tensor are neither +0.0 nor -0.0 (NaN counts), as a
        0-d tensor on its device: |x| into a scratch buffer, its bits counted as integers. On the host
        torch's count_nonzero of floats is several times slower where zeros and nonzeros mix (57 ms
        against 12 ms for 11 M elements, measured: docs/PERFORMANCE.md)."""
        import torch
        key = (tensor.device, tensor.dtype)
        scratch = self._scratch.get(key)
        if scratch is None or scratch.numel() < tensor.numel():
            scratch = tensor.new_empty(tensor.numel())
            self._scratch[key] = scratch  # the hook uses it synchronously, one bucket after the other
        out = scratch.narrow(0, 0, tensor.numel())
        torch.abs(tensor, out=out)  # clears the sign bit: -0.0 becomes +0.0, all bits zero
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
        return out.view(ints).count_nonzero()

    def _count(self, **amounts):
        with self._lock:
            for key, amount in amounts.items():
                self.stats[key] += amount

    def update_masks(self, masks=None):
        """Masks changed (pruned again, regrown, or new `masks`): every bucket votes again at its next
        step, on the masks it finds then. Call it on every rank at the same point, between steps. A
        rank that regrows weights without it still gets the default's result (the check sends the
        buckets dense, counted in stats["fallback"]) but saves nothing on them."""
        if masks is not None:
            self._given = dict(masks)
        self._plans.clear()
        self.epoch += 1

    def _keep_of(self, name, param):
        """The flat bool keep of a parameter (None: nothing pruned)."""
        keep = self._given.get(name)
        if keep is None and name.endswith("_orig"):
            owner_name, _, attr = name.rpartition(".")
            owner = self.module.get_submodule(owner_name) if owner_name else self.module
            keep = getattr(owner, attr[:-len("_orig")] + "_mask", None)
        if keep is None:
            return None
        if keep.numel() != param.numel():
            raise ValueError("the mask of %s has %d elements, the parameter %d" % (name, keep.numel(), param.numel()))
        return keep.detach().reshape(-1).ne(0).cpu()

    def _pieces_of(self, group):
        """The piece size of a host bucket on group, 0 for one piece (see the module's doc)."""
        if self.piece_elements is not None:
            return self.piece_elements
        return PIECE_ELEMENTS if group.size() == 2 else 0

    def _bucket_keep(self, names, params, buffer):
        """The bucket's keep over its flat buffer: DDP lays the parameters out back to back in the
        bucket's order."""
        import torch
        if sum(p.numel() for p in params) != buffer.numel():
            raise ValueError("the bucket's parameters hold %d elements, its buffer %d" % (
                sum(p.numel() for p in params), buffer.numel()))
        if not buffer.is_floating_point():
            raise ValueError("the bucket's buffer is %s, not floating point" % buffer.dtype)
        keep = torch.ones(buffer.numel(), dtype=torch.bool)
        offset = 0
        for name, param in zip(names, params):
            part = self._keep_of(name, param)
            if part is not None:
                keep[offset:offset + param.numel()] = part
            offset += param.numel()
        return keep

    def _plan(self, bucket, buffer, group):
        """The agreed plan of this bucket, voted on at its first sight in this epoch; None: dense."""
        params = bucket.parameters()
        names = tuple(self._names.get(p, "?%d" % i) for i, p in enumerate(params))
        key = (bucket.index(), names)
        if key in self._plans:
            return self._plans[key]
        keep, refusal = None, _REFUSAL_NONE
        try:
            if any(n.startswith("?") for n in names):
                raise ValueError("a parameter of the bucket is not in the model given to CompactState")
            keep = self._bucket_keep(names, params, buffer)
            subject = _hash(key, buffer.numel(), str(buffer.dtype), bytes(keep.numpy().tobytes()))
        except (ValueError, RuntimeError):  # refused on this rank; every rank still votes
            refusal, subject = _REFUSAL_COULD_NOT_PREPARE, 0
        # The piece size and the buffer's device decide how many all-reduces a bucket issues: ranks
        # that would issue different numbers never compact together.
        settings = _hash(_HOOK_VERSION, group.size(), str(self.wire_dtype), self._pieces_of(group),
                         buffer.device.type)
        self._count(votes=1)
        plan = None
        if _agree(group, subject, settings, refusal):
            self._count(agreed=1)
            if not bool(keep.all()):
                plan = _Plan(keep)
                self._fallback_group(group)  # created here, where every rank is, never in a callback
        self._plans[key] = plan
        return plan

    def _fallback_group(self, group):
        """The process group (same ranks, same backend) a bucket's fallback all-reduce runs on. A
        fallback is issued from a future's callback, on a thread of the backend's: on the bucket's
        own group it would race the all-reduces the hook issues from autograd's thread, and the
        ranks could issue them in different orders."""
        import torch.distributed as dist
        found = self._fallback_groups.get(group)
        if found is None:
            found = dist.new_group(ranks=dist.get_process_group_ranks(group), backend=dist.get_backend(group),
                                   use_local_synchronization=True)
            self._fallback_groups[group] = found
        return found

    def _settle(self, group, plan, buffer, sent, whole):
        """The future of a compacted bucket: each piece's all-reduce (kept elements and flag) settles
        after the piece issued before it (of this bucket or an earlier one), so fallbacks go out in
        issue order on every rank. A piece whose summed flag is zero is scattered back (+0.0 where
        the mask prunes); otherwise its region of the buffer, untouched so far, runs the default's
        division and all-reduce, on every rank alike."""
        import functools

        import torch
        settled = []
        for future, offset, length, region in sent:
            waits = [future] if self._last is None else [self._last, future]
            step = torch.futures.collect_all(waits).then(
                functools.partial(self._settle_piece, group, plan, buffer, future, offset, length, region, whole))
            self._last = step.then(_swallow)  # a failed piece fails its bucket, never the next one
            settled.append(step)
        if len(settled) == 1:
            return settled[0]
        return torch.futures.collect_all(settled).then(functools.partial(_whole, buffer))

    def _settle_piece(self, group, plan, buffer, future, offset, length, region, whole, _):
        import torch.distributed as dist
        reduced = future.value()[0]  # this piece's error, if any
        if not _flag_up(reduced, length):
            values = reduced.narrow(0, 0, length)
            if whole:
                return plan.compaction.scatter(values, buffer)
            region.zero_()  # the pieces' regions tile the buffer: each zeroes its own
            plan.compaction.scatter_piece(values, buffer, offset)
            return buffer
        self._count(fallback=1, elements_sent=region.numel())
        if not self._warned:
            self._warned = True
            logging.getLogger("sieve").warning(
                "sieve.ddp: a bucket ran as DDP's default all-reduce on every rank: a rank's gradient is nonzero "
                "(or NaN) where its mask prunes (weights regrown without update_masks()? a gradient term outside "
                "the mask?); said once, counted in stats['fallback']")
        region.div_(group.size())
        dist.all_reduce(region, group=self._fallback_groups[group])
        return buffer


def _group_of(state):
    import torch.distributed as dist
    return state.process_group if state.process_group is not None else dist.group.WORLD


def _default(group, buffer):
    """DDP's default hook, exactly (default_hooks.allreduce_hook): divide, then all-reduce."""
    import torch.distributed as dist
    buffer.div_(group.size())
    return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])


def compact_hook(state, bucket):
    """DDP communication hook (register_comm_hook(state, compact_hook)): the bucket's kept elements
    are gathered, divided by the world size, all-reduced on state's process group with this rank's
    check flag, and scattered back; where any rank's flag is up, or the bucket has no agreed mask,
    the bucket runs as DDP's default hook."""
    import torch.distributed as dist
    if not hasattr(bucket, "buffer"):
        _refuse_per_parameter_reducer()
    group = _group_of(state)
    buffer = bucket.buffer()
    plan = state._plan(bucket, buffer, group)
    if plan is None:
        state._count(dense=1, elements_sent=buffer.numel(), elements_dense=buffer.numel())
        return _default(group, buffer)
    pieces = state._pieces_of(group)
    if pieces and plan.compaction.pipelines(buffer) and plan.kept > pieces:
        cuts = plan.compaction.pieces(pieces)
    else:
        cuts = [(0, plan.kept)]
    state._count(compacted=1, elements_sent=plan.kept + len(cuts), elements_dense=buffer.numel(),
                 pieces=len(cuts) if len(cuts) > 1 else 0)
    wire = plan.wire(buffer, len(cuts))
    sent = []
    for number, (offset, length) in enumerate(cuts):
        piece = wire.narrow(0, offset + number, length + 1)  # its kept elements, then its flag
        kept = piece.narrow(0, 0, length)
        if len(cuts) == 1:
            plan.compaction.gather(buffer, out=kept)
            region = buffer
        else:
            plan.compaction.gather_piece(buffer, offset, length, out=kept)
            start, end = plan.compaction.piece_region(offset, length)
            region = buffer.narrow(0, start, end - start)
        # Nonzero (or NaN, or inf) elements of the region that the mask prunes, counted before the
        # division and the cast, which could turn a tiny one into zero.
        stray = state._nonzero(region) - state._nonzero(kept)
        if state.wire_dtype is not None:
            piece = piece.to(state.wire_dtype)  # bf16_compress_hook's order: cast, then divide
        piece.div_(group.size())
        # Each rank adds 0 or 1: the sum is a small count, exact in any float dtype, and an element
        # of its own, so a NaN among the gradients cannot reach it.
        piece.narrow(0, length, 1).copy_(stray.clamp(max=1).to(piece.dtype).reshape(1))
        future = dist.all_reduce(piece, group=group, async_op=True).get_future()
        sent.append((future, offset, length, region))
    return state._settle(group, plan, buffer, sent, whole=len(cuts) == 1)


def _refuse_per_parameter_reducer():
    """Compiled autograd's Python reducer (torch._dynamo.config.optimize_ddp = "python_reducer")
    calls a DDP hook with one parameter's (gradient, parameter), not a bucket: no bucket, no agreed
    mask. Every rank runs the same configuration, so every rank refuses here alike."""
    import torch
    raise RuntimeError("sieve.ddp.compact_hook does not support PyTorch %s's compiled-autograd Python reducer "
                       "(torch._dynamo.config.optimize_ddp=%r calls the hook per parameter, not per bucket): use "
                       "optimize_ddp=True, with or without compiled autograd" % (
                           torch.__version__, torch._dynamo.config.optimize_ddp))


def _flag_up(reduced, length):
    return bool(reduced[length].ne(0))


def _swallow(fut):
    try:
        fut.value()
    except Exception:  # the piece's own future reports it; the next piece only waits for it
        pass


def _whole(buffer, fut):
    for piece in fut.value():
        piece.value()  # a piece's error is the bucket's
    return buffer


def register(ddp_model, masks=None, wire_dtype=None, process_group=None, piece_elements=None):
    """Registers compact_hook on a DistributedDataParallel model; returns its CompactState."""
    state = CompactState(ddp_model, process_group=process_group, masks=masks, wire_dtype=wire_dtype,
                         piece_elements=piece_elements)
    ddp_model.register_comm_hook(state, compact_hook)
    return state
