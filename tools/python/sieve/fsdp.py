# SPDX-License-Identifier: Apache-2.0
"""sieve.fsdp: FSDP2's own custom-collective API (fully_shard's set_custom_reduce_scatter and
set_custom_all_gather) compacting pruned parameter groups, exactly.

    import sieve.fsdp
    model = ...                              # fully_shard on the blocks and the root, pruned
    sieve.fsdp.compact(model)                # every rank, same point, after pruning
    ... train as before ...

Every fully_shard module's parameter group gets its own reduce-scatter and all-gather object, bound to
that group's masks: the layout of its flat buffer (parameter order, FSDP2's padding, every rank's
shard) comes from the group itself (sieve.fsdp2_layout), so no cursor and no shape matching identifies
a collective (the preloaded proxy's path, sieve.publish_fsdp, must find a collective by its kind, size
and order; it stays for programs that cannot take a custom collective). The collectives move only the
kept elements of every rank's shard, each rank's segment padded to the largest one, and expand them
back where FSDP expects them.

Exactness is checked, not assumed: every compacted buffer carries one flag per rank saying whether
that rank holds anything nonzero (or NaN) where the mask prunes. The flag travels inside the same
collective, so every rank sees the same flags and, where one is set, every rank runs FSDP's own
collective on the original buffer instead. Elsewhere every kept element is reduced by the same
elementwise operation as FSDP's own reduce-scatter, and every pruned one is zero on every rank: at 2
ranks each output shard equals FSDP's bit for bit (a sum of two is commutative) with one exception,
the sign of zero: a pruned element is +0.0 where FSDP's sum of -0.0 values gives -0.0, and a
compacted all-gather writes +0.0 where a shard held -0.0 (equal values; an SGD momentum buffer can
carry such a zero into a parameter). At more ranks the compacted layout keeps Gloo's ring order
(_Layout.maps), and another backend's order for another buffer size may differ in the last bits.
stats() counts every element sent, a fallback's dense re-run included. compact(model) again
re-prunes (its docstring says how).

Gather and scatter are sieve._kernels' (one Compaction per rank segment: the elements of that segment
that travel): Sieve's own CUDA kernels on CUDA tensors where the library has them, torch elsewhere.
"""

import hashlib
import logging

try:  # the module imports without torch (the package does), compact() needs it
    import torch
    import torch.distributed as dist
except ImportError:
    torch = dist = None

from . import fsdp_layout as _layout
from . import fsdp_masks as _masks
from ._constants import _ERR_INVALID, _ERR_UNSUPPORTED
from ._kernels import Compaction
from ._library import SieveError

__all__ = ["compact", "uncompact", "stats", "CompactReduceScatter", "CompactAllGather"]

_counters = {"compacted": 0, "dense": 0, "fallback": 0, "elements_sent": 0, "elements_dense": 0}


def stats():
    """This process's counts: collectives run compacted, run dense (not agreed or not mappable),
    fallen back to dense because a pruned element was nonzero; elements this rank sent for the
    collectives Sieve handled (a ring's share: flags and padding to the largest segment included, and
    a fallback's compacted attempt and its dense re-run both), and what FSDP's own collectives would
    have sent instead."""
    return dict(_counters)


class _Layout:
    """One parameter group's flat layout: per parameter, a (world_size, padded shard numel) bool
    tensor (row r: rank r's shard, True = kept), and for a set of parameters (FSDP leaves out those
    without a gradient in a step) the index maps of its compacted buffer."""

    def __init__(self, parts, world_size, rank):
        self.parts, self.world_size, self.rank = parts, world_size, rank
        self._maps = {}

    def maps(self, members):
        """For the parameters `members` (indices, group order): dict(segment S, length L of every rank's
        compacted segment (its flag at L - 1), travel: per rank r a sieve._kernels.Compaction of the
        elements of r's segment that travel, packed at the start of r's compacted segment (Sieve's
        CUDA kernels on a GPU, torch elsewhere), pruned_all/pruned_mine: the pruned places of the flat
        world x S buffer and of this rank's segment).

        The compacted layout keeps the sum order of Gloo's ring (what reduce_scatter_tensor runs on
        Gloo: an all-reduce whose chunks are 2 * ceil(S / 2) elements long, each chunk summed in its
        own order): chunk c starts c elements into rank c's segment when S is odd. So the first
        world - 1 elements of every rank's segment always travel (zeros where pruned) and L has S's
        parity; then every kept element is summed in the chunk it is summed in by FSDP's own
        reduce-scatter, and the result is bit-identical at any number of ranks (measured to 100 000
        elements a rank; docs/PERFORMANCE.md)."""
        members = tuple(members)
        found = self._maps.get(members)
        if found is not None:
            return found
        w = self.world_size
        bits = torch.cat([self.parts[i] for i in members], dim=1)  # (w, S)
        segment = bits.shape[1]
        travel = bits.clone()
        travel[:, :min(w - 1, segment)] = True
        length = int(travel.sum(dim=1).max()) + 1 if w else 1
        if (length - segment) % 2:
            length += 1
        pruned = (~bits).reshape(-1).nonzero().reshape(-1)
        found = {
            "segment": segment, "length": length, "travel": [Compaction(travel[r]) for r in range(w)],
            "pruned_all": pruned, "pruned_mine": (~bits[self.rank]).nonzero().reshape(-1),
        }
        self._maps[members] = found
        return found


def _on(tensor, index):
    return index if index.device == tensor.device else index.to(tensor.device)


def _dense_sent(numel, world_size, kind):
    # What FSDP's own collective sends per rank (a ring's share): (w-1)/w of the buffer.
    return numel * (world_size - 1) // world_size if kind == "reduce_scatter" else numel * (world_size - 1)


def _count_dense(numel, world_size, kind):
    # A collective Sieve's object ran as FSDP's own: its bytes are sent, and are what FSDP sends.
    _counters["dense"] += 1
    _counters["elements_sent"] += _dense_sent(numel, world_size, kind)
    _counters["elements_dense"] += _dense_sent(numel, world_size, kind)


# FSDP2's ReduceScatter and AllGather (torch.distributed.fsdp._fully_shard._fsdp_api) are interfaces
# FSDP never checks with isinstance: these implement them (allocate, __call__) without importing them,
# so the package imports where torch is missing.
class CompactReduceScatter:
    """The reduce-scatter of one parameter group: compacts every destination rank's segment of the
    gradient buffer to that rank's kept elements (plus a flag), reduce-scatters equal segments padded
    to the largest, and expands this rank's segment into FSDP's output shard."""

    def __init__(self, label, layout, group, group_of_params):
        self.label, self.layout, self.group = label, layout, group
        self._params = group_of_params
        self.with_grad = None  # set by the group's post_backward wrapper each step
        self.original = None  # the collective compact() replaced (None: FSDP's default)

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        layout = self.layout
        members = self.with_grad
        maps = layout.maps(members) if members else None
        w = layout.world_size
        if (maps is None or group is not self.group or input_tensor.dim() != 1 or output_tensor.dim() != 1
                or input_tensor.numel() != w * maps["segment"] or output_tensor.numel() != maps["segment"]):
            _count_dense(input_tensor.numel(), group.size(), "reduce_scatter")
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        n = maps["length"]
        flat = input_tensor
        flag = bool(flat.index_select(0, _on(flat, maps["pruned_all"])).ne(0).any())
        segment = maps["segment"]
        buffer = flat.new_zeros(w * n)
        for r, travel in enumerate(maps["travel"]):
            travel.gather(flat.narrow(0, r * segment, segment), out=buffer.narrow(0, r * n, travel.kept))
        # Every destination segment carries this rank's flag, so every rank receives the same reduced
        # flag (the sum, or the average, of all ranks' flags) and decides alike.
        buffer.view(w, n)[:, n - 1] = 1.0 if flag else 0.0
        received = flat.new_empty(n)
        dist.reduce_scatter_tensor(received, buffer, op=op, group=group)
        _counters["elements_sent"] += w * n * (w - 1) // w
        _counters["elements_dense"] += _dense_sent(input_tensor.numel(), w, "reduce_scatter")
        if bool(received[n - 1].ne(0)):
            _counters["fallback"] += 1
            _counters["elements_sent"] += _dense_sent(input_tensor.numel(), w, "reduce_scatter")  # the re-run's
            _warn_fallback(self.label, "reduce-scatter", "a gradient")
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        _counters["compacted"] += 1
        mine = maps["travel"][layout.rank]
        mine.scatter(received.narrow(0, 0, mine.kept), output_tensor)  # zero where nothing travelled
        return None  # done synchronously: FSDP waits only on a returned Work


class CompactAllGather:
    """The all-gather of one parameter group: every rank sends the kept elements of its shard (plus a
    flag), padded to the largest rank's count, and every rank expands all of them into FSDP's buffer."""

    def __init__(self, label, layout, group, dtype):
        self.label, self.layout, self.group, self.dtype = label, layout, group, dtype
        self._members = tuple(range(len(layout.parts)))
        self.original = None  # the collective compact() replaced (None: FSDP's default)

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        layout = self.layout
        maps = layout.maps(self._members)
        w = layout.world_size
        if (group is not self.group or input_tensor.dtype != self.dtype or input_tensor.numel() != maps["segment"]
                or output_tensor.numel() != w * maps["segment"]):
            # Another group (reshard_after_forward=int regathers on a smaller mesh) or another buffer.
            _count_dense(input_tensor.numel(), group.size(), "all_gather")
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)
        n = maps["length"]
        mine = input_tensor.reshape(-1)
        flag = bool(mine.index_select(0, _on(mine, maps["pruned_mine"])).ne(0).any())
        buffer = mine.new_zeros(n)
        own = maps["travel"][layout.rank]
        own.gather(mine, out=buffer.narrow(0, 0, own.kept))
        buffer[n - 1] = 1 if flag else 0
        received = mine.new_empty(w * n)
        dist.all_gather_into_tensor(received, buffer, group=group)
        _counters["elements_sent"] += (w - 1) * n
        _counters["elements_dense"] += _dense_sent(mine.numel(), w, "all_gather")
        if bool(received.view(w, n)[:, n - 1].ne(0).any()):
            _counters["fallback"] += 1
            _counters["elements_sent"] += _dense_sent(mine.numel(), w, "all_gather")  # the re-run's
            _warn_fallback(self.label, "all-gather", "a parameter")
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)
        _counters["compacted"] += 1
        out = output_tensor.reshape(-1)
        segment = maps["segment"]
        for r, travel in enumerate(maps["travel"]):  # each zero where nothing travelled
            travel.scatter(received.narrow(0, r * n, travel.kept), out.narrow(0, r * segment, segment))
        return None


# What sieve.fsdp needs of FSDP2's private modules (torch.distributed.fsdp._fully_shard): the
# interfaces its collectives implement and FSDP's own collectives, which uncompact() puts back; and of
# a parameter group, what _record_grads reads. Tested on PyTorch 2.11 and 2.15 (docs/DEPLOY.md).
_API = "torch.distributed.fsdp._fully_shard._fsdp_api"
_COLLECTIVES = "torch.distributed.fsdp._fully_shard._fsdp_collectives"


def _internals():
    """(DefaultAllGather, DefaultReduceScatter), or SieveError naming the PyTorch version whose
    FSDP2 moved what sieve.fsdp builds on: refused, on every rank alike (the same torch), never a
    silent run on FSDP's own collectives."""
    import importlib
    try:
        api = importlib.import_module(_API)
        collectives = importlib.import_module(_COLLECTIVES)
        found = (api.AllGather, api.ReduceScatter, collectives.DefaultAllGather, collectives.DefaultReduceScatter)
    except (ImportError, AttributeError) as error:
        raise SieveError(_ERR_UNSUPPORTED, "sieve.fsdp does not support PyTorch %s: FSDP2's private modules moved "
                                           "(%s)" % (torch.__version__, error)) from None
    return found[2], found[3]


_warned = set()


def _warn_fallback(label, kind, what):
    if (label, kind) not in _warned:  # once per group and kind: a step loop would repeat it forever
        _warned.add((label, kind))
        logging.getLogger("sieve").warning("sieve.fsdp: %s's %s ran dense: %s is nonzero where its mask prunes",
                                           label, kind, what)


def _refuse(label, reason):
    logging.getLogger("sieve").warning("sieve.fsdp: %s runs FSDP's own collectives: %s", label, reason)


def _root_state(model):
    getter = getattr(model, "_get_fsdp_state", None)
    if not callable(getter):
        raise SieveError(_ERR_INVALID, "sieve.fsdp.compact takes the root module fully_shard wrapped")
    state = getter()
    if getattr(state, "_is_root", None) is None:
        state._lazy_init()  # what the first forward does: decides the root and every group's dtypes
    return state


def _group_plan(state, module, label, names, masks, used):
    """(layout, process group, gather dtype) for one fully_shard state, None where it holds no
    parameter, or a reason string where it cannot be mapped exactly. Every parameter's mask is looked
    up first, so masks= naming a refused group's parameters is not an error."""
    groups = _masks._state_groups(state)
    entries = []
    for group in groups:
        for p in group.fsdp_params:
            module_, param_name = p._module_info.module, p._module_info.param_name
            name = _masks._param_name(names, module_, param_name)
            entries.append((p, name, _masks._mask_for(module_, param_name, name, masks, used)))
    if not groups:
        return None
    if len(groups) > 1:
        return "several parameter groups on one module (per-parameter meshes)"
    group = groups[0]
    if type(group._all_gather_comm).__module__.split(".")[0] != "torch" or \
            type(group._reduce_scatter_comm).__module__.split(".")[0] != "torch":
        return "it already has a custom collective (%s)" % type(group._reduce_scatter_comm).__name__
    mesh = group.mesh_info
    comm = getattr(mesh, "shard_process_group", None)
    if comm is None:
        return "its mesh has no shard dimension (replicate): it all-reduces"
    reason = _unmappable(entries)
    if reason is not None:
        return reason
    world_size, rank = int(mesh.shard_mesh_size), int(mesh.shard_mesh_rank)
    parts, dtypes, pruned = [], set(), 0
    for p, name, keep in entries:
        dim = getattr(getattr(p, "fsdp_placement", None), "dim", 0)
        shape = tuple(p._orig_size)
        try:
            keeps = [_layout._keep_of(keep, shape, name) if keep is not None else None]
            bits = _layout.fsdp2_layout([shape], world_size, keeps, [dim])
        except SieveError as error:
            return str(error)
        bits = bits.view(world_size, -1)
        if bits.shape[1] != torch.Size(p.padded_sharded_param_size).numel():
            return "%s: FSDP pads its shard to %s elements, the layout has %d" % (
                name, tuple(p.padded_sharded_param_size), bits.shape[1])
        parts.append(bits)
        pruned += _masks._pruned_count([keep])
        dtypes.add(p.param_dtype or p.orig_dtype)
    if not parts:
        return None
    layout = _Layout(parts, world_size, rank)
    layout.pruned = pruned  # elements the masks prune, padding not counted
    gather_dtype = dtypes.pop() if len(dtypes) == 1 else None
    return layout, comm, gather_dtype


def _mesh_text(mesh):
    names = getattr(mesh, "mesh_dim_names", None) or ["dim%d" % i for i in range(mesh.ndim)]
    return " x ".join("%s=%d" % (n, s) for n, s in zip(names, mesh.shape))


def _unmappable(entries):
    """Why a group's flat buffer is not its parameters' FSDP shards as fsdp2_layout cuts them (None:
    it is). FSDP2 2.11 gathers a DTensor parameter's local tensor-parallel shard, cut again over the
    data-parallel mesh (its _spmd_mesh, 2-D or more), and an all-gather extension's own inputs: the
    masks are of full parameters, and no layout of them says where those elements sit."""
    tensor_parallel = [(name, p) for p, name, _ in entries if getattr(p, "is_dtensor", False)]
    if tensor_parallel and len(tensor_parallel) < len(entries):
        name, p = tensor_parallel[0]
        plain = next(n for q, n, _ in entries if not getattr(q, "is_dtensor", False))
        return "its parameters are on different meshes (%s on %s, %s on the data-parallel mesh alone)" % (
            name, _mesh_text(p._spmd_mesh), plain)
    if tensor_parallel:
        name, p = tensor_parallel[0]
        return "%s is a DTensor on a %d-D mesh %s (tensor parallel): the buffer holds its tensor-parallel shard" % (
            name, p._spmd_mesh.ndim, _mesh_text(p._spmd_mesh))
    for p, name, _ in entries:
        if hasattr(getattr(p, "_sharded_local_tensor", None), "fsdp_pre_all_gather"):
            return "%s has an all-gather extension (fsdp_pre_all_gather): FSDP gathers what it returns" % name
        if getattr(p, "offload_to_cpu", False) and p.device.type != "cpu":
            return "%s is offloaded to the CPU" % name
    return None


def _local_zero(group, layout):
    """Whether this rank's shards hold exact zeros wherever the masks prune (torch.nn.utils.prune keeps
    the original values in weight_orig: those all-gather dense, their gradients still compact)."""
    for p, bits in zip(group.fsdp_params, layout.parts):
        local = p._sharded_param_data.reshape(-1)
        pruned = ~bits[layout.rank]
        if local.numel() != pruned.numel() or bool(local[pruned.to(local.device)].ne(0).any()):
            return False
    return True


def _digest(layout, gather_dtype):
    h = hashlib.sha256()
    h.update(repr((layout.world_size, [tuple(b.shape) for b in layout.parts], str(gather_dtype))).encode())
    for bits in layout.parts:
        h.update(bits.to(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1  # 63 bits: a non-negative int64


def _agree(comm, votes):
    """The commit: one all-reduce of every group's digest and gather vote on the mesh's process group.
    Returns, per group, (agreed, gather agreed), the same on every rank."""
    count = torch.tensor([len(votes), -len(votes)], dtype=torch.int64)
    dist.all_reduce(count, op=dist.ReduceOp.MAX, group=comm)
    if int(count[0]) != len(votes) or -int(count[1]) != len(votes):
        return [(False, False)] * len(votes), "the ranks wrap different numbers of modules"
    if not votes:
        return [], None
    words = [d for d, _ in votes] + [-d for d, _ in votes] + [0 if ok else 1 for _, ok in votes]
    token = torch.tensor(words, dtype=torch.int64)
    dist.all_reduce(token, op=dist.ReduceOp.MAX, group=comm)
    n = len(votes)
    out = []
    for i, (d, _) in enumerate(votes):
        agreed = int(token[i]) == d and -int(token[n + i]) == d
        out.append((agreed, agreed and int(token[2 * n + i]) == 0))
    return out, None


def compact(model, masks=None):
    """Installs Sieve's reduce-scatter and all-gather on every fully_shard module of `model` (the root,
    fully_shard wrapped), each bound to its parameter group's masks: torch.nn.utils.prune's
    <name>_mask buffers, or masks[name] (model.named_parameters()'s names, a tensor of the parameter's
    full shape, nonzero = kept). A collective: every rank calls it at the same point, after pruning.

    Returns {module name: "compacted" | "gradients only" | "nothing pruned" | why it runs dense}, the same
    on every rank.
    A group whose masks the ranks do not all agree on, or that cannot be mapped exactly (several
    parameter groups on one module, tensor-parallel DTensors, all-gather extensions), keeps FSDP's own
    collectives, with one warning line. The all-gather compacts only where every rank's pruned weights
    are exactly zero (torch.nn.utils.prune keeps them in weight_orig); zero them to compact it too.

    Re-pruning is this same call: after masks change (pruned further, regrown, new `masks`), call
    compact(model) again on every rank at the same point, between steps. It first puts back the
    collectives an earlier compact() replaced (uncompact()), then plans, agrees and installs every
    group anew from the masks as they are now. Until then the collectives of the earlier masks keep
    running: still exact (their check sends a regrown weight's gradient dense, counted in
    stats()["fallback"]), but saving nothing where the masks moved."""
    if torch is None or not hasattr(getattr(model, "set_custom_reduce_scatter", None), "__call__"):
        raise SieveError(_ERR_INVALID, "sieve.fsdp.compact takes a model wrapped by fully_shard of PyTorch >= 2.11 "
                                       "(its set_custom_reduce_scatter and set_custom_all_gather)")
    _internals()
    masks = dict(masks or {})
    _root_state(model)
    uncompact(model)  # a second call re-prunes: every group is planned from its masks as they are now
    names = _masks._module_names(model)
    used = set()
    plans = []
    for state, module in _masks._fsdp2_states(model):
        label = names.get(id(module)) or "<root>"
        plan = _group_plan(state, module, label, names, masks, used)
        if plan is not None:
            plans.append((label, state, module, plan))
    unknown = sorted(set(masks) - used)
    if unknown:
        raise SieveError(_ERR_INVALID, "masks names %s, which no FSDP2 group of this model holds" % (
            ", ".join(unknown)))
    result = {}
    by_comm = {}
    for label, state, module, plan in plans:
        if isinstance(plan, str):
            _refuse(label, plan)
            result[label] = plan
            continue
        layout, comm, gather_dtype = plan
        group = _masks._state_groups(state)[0]
        gather_ok = gather_dtype is not None and _local_zero(group, layout)
        by_comm.setdefault(comm, []).append((label, module, group, layout, gather_dtype, gather_ok))
    for comm, members in by_comm.items():
        outcome, why = _agree(comm, [(_digest(m[3], m[4]), m[5]) for m in members])
        for (label, module, group, layout, gather_dtype, _), (agreed, gather) in zip(members, outcome):
            if not agreed:
                reason = why or "the ranks' masks differ"
                _refuse(label, reason)
                result[label] = reason
                continue
            if not layout.pruned:  # the masks are agreed, so this is alike on every rank
                result[label] = "nothing pruned"
                continue
            reduce_scatter = CompactReduceScatter(label, layout, comm, group)
            reduce_scatter.original = group._reduce_scatter_comm  # what uncompact() puts back
            _record_grads(group, reduce_scatter)
            module.set_custom_reduce_scatter(reduce_scatter)
            if gather:
                all_gather = CompactAllGather(label, layout, comm, gather_dtype)
                all_gather.original = group._all_gather_comm
                module.set_custom_all_gather(all_gather)
            result[label] = "compacted" if gather else "gradients only"
    return result


def _reduced_2_11(group):
    """The parameters FSDP2 2.11's post_backward reduce-scatters, in buffer order: those with a
    gradient (or an accumulated one), in the group's order."""
    members = []
    for i, p in enumerate(group.fsdp_params):
        if hasattr(p, "_unsharded_param") and (p.unsharded_accumulated_grad is not None or
                                               p.unsharded_param.grad is not None):
            members.append(i)
    return tuple(members)


def _reduced_2_15(group):
    """The same for FSDP2 2.15 (_take_unsharded_grads_to_reduce): its packing order
    (_reduce_scatter_param_indices: the group's order, grouped by gradient dtype), keeping a parameter
    with a gradient, with a pending partial reduction, or any trainable one under
    set_reduce_scatter_unused_params (its zeros travel)."""
    members = []
    for i in group._reduce_scatter_param_indices:
        p = group.fsdp_params[i]
        if not hasattr(p, "_unsharded_param"):
            continue
        param = p.unsharded_param
        if (param.grad is not None or group._get_partial_reduce_grad(p) is not None or
                (getattr(group, "reduce_scatter_unused_params", False) and param.requires_grad)):
            members.append(i)
    return tuple(members)


def _record_grads(group, reduce_scatter):
    """Wraps the group's post_backward to note which parameters it reduce-scatters this step, in the
    order it packs them: FSDP leaves a frozen or unused parameter out of the buffer, so the layout of
    that step's buffer is the masks of exactly those parameters. The same test as FSDP2's own
    post_backward, of the version at hand (_internals() chose it)."""
    original = group.post_backward
    if getattr(original, "_sieve_reduce_scatter", None) is not None:
        original = original._sieve_original
    reduced = _reduced_2_15 if hasattr(group, "_reduce_scatter_param_indices") else _reduced_2_11

    def post_backward(*unused):
        reduce_scatter.with_grad = reduced(group)
        return original(*unused)

    post_backward._sieve_reduce_scatter = reduce_scatter
    post_backward._sieve_original = original
    group.post_backward = post_backward


def uncompact(model):
    """Puts back, on every module compact() equipped, the collectives it found there (FSDP's own):
    training goes on exactly as FSDP2 without Sieve. Every rank calls it at the same point, between
    steps. compact(model) again re-prunes by itself; this is for going back to FSDP's collectives."""
    DefaultAllGather, DefaultReduceScatter = _internals()
    for state, module in _masks._fsdp2_states(model):
        for group in _masks._state_groups(state):
            wrapped = getattr(group.post_backward, "_sieve_original", None)
            if wrapped is not None:
                group.post_backward = wrapped
            if isinstance(group._reduce_scatter_comm, CompactReduceScatter):
                group._reduce_scatter_comm = group._reduce_scatter_comm.original or DefaultReduceScatter()
            if isinstance(group._all_gather_comm, CompactAllGather):
                group._all_gather_comm = group._all_gather_comm.original or DefaultAllGather()
