# SPDX-License-Identifier: Apache-2.0
"""FSDP: the masks of its collectives (FSDP2 fully_shard and FSDP1), computed from the model's
structure and published as masks that name a collective."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ._constants import _ERR_INVALID
from ._library import SieveError
from .masks import (_dtype_code_of, _fsdp_published, _packbits, _publish_collective_bits, _retract_id, commit)

# The layouts of FSDP's buffers (fsdp2_layout, fsdp1_layout) live in fsdp_layout.py.
from .fsdp_layout import _keep_of, fsdp1_layout, fsdp2_layout

if TYPE_CHECKING:
    import torch
    import torch.distributed


def semi_structured_masks(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{parameter name: keep} for every floating-point parameter of 2 or more dims, last dim a multiple
    of 4, that holds a nonzero and whose every group of 4 consecutive elements along the last dim has
    at most 2 nonzeros (the 2:4 pattern of SparseGPT, Wanda and sparse tensor cores); keep is its
    nonzeros. Names are model.named_parameters()'s, FSDP1's wrapper prefixes removed.

    Call it on the full model, before sharding, on every rank alike. A weight's zeros are only a mask
    while training keeps them zero and its gradient zero there, so make it one:
    torch.nn.utils.prune.custom_from_mask(module, "weight", keep) turns it into the <name>_orig /
    <name>_mask pair that publish_fsdp and publish_pruned_model map, with exactly zero gradients where
    it prunes. Passing it as publish_fsdp(masks=...) instead is the caller's promise that the weight
    and its gradient stay zero outside keep (a gradient hook, say)."""
    found = {}
    for name, param in model.named_parameters():
        if not param.is_floating_point() or param.dim() < 2 or param.shape[-1] % 4 or param.numel() == 0:
            continue
        keep = param.detach().ne(0)
        if not bool(keep.any()):
            continue  # all zero (a zero-initialised adapter, say): no pattern to read
        if int(keep.reshape(-1, 4).sum(dim=1).max()) <= 2:
            found[_clean_name(name)] = keep.cpu()
    return found


# Components that wrappers insert in parameter names (FSDP1, activation checkpointing, torch.compile).
_WRAPPER_NAMES = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def _clean_name(name):
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_NAMES)


# --- FSDP: the order of its collectives --------------------------------------------------------
#
# A communicator uses a collective mask only where the call's shape (kind, count, dtype) names it for
# certain: one committed mask of that shape, or several that are all equal. Identical groups
# (transformer blocks) pruned differently share a shape with different masks, so those calls run
# dense on every rank (no order can say which mask is whose); sieve.fsdp.compact is the exact way
# for them. Masks are still published in issue order, which keeps the table readable and stable.


class _FsdpGroup:
    """What one FSDP2 parameter group or one FSDP1 FlatParameter communicates per step.

    regather: how its parameters come back for backward: None (kept unsharded after forward: the
    root, reshard_after_forward=False, SHARD_GRAD_OP), "same" (all-gathered again on the same
    communicator), "other" (FSDP2 reshard_after_forward=int: on a smaller mesh's communicator).
    reduces: whether it reduce-scatters (it has trainable parameters). all_gather, reduce_scatter:
    its _Collective entries (None where it issues none)."""

    def __init__(self, name, regather=None, reduces=True, all_gather=None, reduce_scatter=None):
        self.name, self.regather, self.reduces = name, regather, reduces
        self.all_gather, self.reduce_scatter = all_gather, reduce_scatter

    def __repr__(self):
        return "_FsdpGroup(%r)" % self.name


class _FsdpUnit:
    """One FSDP state (a fully_shard call, an FSDP1 instance): its groups, the unit whose forward runs
    it (parent, None for a root), and its prefetch settings: forward_prefetch, units it all-gathers
    right after its own pre-forward; backward_prefetch, units it all-gathers in its pre-backward (None:
    FSDP's default, the group before it in post-forward order, at prefetch_at "pre" (FSDP2, FSDP1's
    BACKWARD_PRE) or "post" (FSDP1's BACKWARD_POST: after its backward, before its reduce-scatter);
    prefetch_at None: no default prefetch); prefetch_limit: how far back FSDP1's default reaches."""

    def __init__(self, name, groups, parent=None, forward_prefetch=(), backward_prefetch=None, prefetch_at="pre",
                 prefetch_limit=1):
        self.name, self.groups, self.parent = name, list(groups), parent
        self.forward_prefetch, self.backward_prefetch = list(forward_prefetch), backward_prefetch
        self.prefetch_at, self.prefetch_limit = prefetch_at, prefetch_limit

    def __repr__(self):
        return "_FsdpUnit(%r)" % self.name


def _issue_order(units):
    """The collectives one training step issues, in order: a list of (kind, group, phase), kind
    "all_gather" or "reduce_scatter", phase "forward" or "backward".

    units: _FsdpUnit in forward (pre-forward) order, each once per step. FSDP's hooks, as 2.11's
    _fsdp_state.py / _fsdp_param_group.py and FSDP1's _runtime_utils.py run them:
    - forward: a unit's pre-forward all-gathers its groups not yet gathered, then its forward
      prefetches; its children run; its post-forward records its groups in post-forward order and
      reshards those that regather;
    - backward, from the root down in reverse: a unit's pre-backward all-gathers its resharded
      groups, then prefetches (by default, per group, the group before it in post-forward order);
      its children's backward runs, in reverse; then each of its groups, last first, reduce-scatters.
      A prefetch of a group already gathered issues nothing.
    It assumes what FSDP assumes of a module tree: each unit's forward input requires grad, so its
    reduce-scatter comes when its backward ends (FSDP2 runs the others', the root's included, in its
    final callback, which for the root is the same place), and an FSDP1 FlatParameter's gradient is
    complete when its module's backward ends."""
    by_name = {unit.name: unit for unit in units}
    children = {unit.name: [] for unit in units}
    roots = []
    for unit in units:
        if unit.parent is None:
            roots.append(unit)
        elif unit.parent not in by_name:
            raise SieveError(_ERR_INVALID, "unit %r has parent %r, which is no unit" % (unit.name, unit.parent))
        else:
            children[unit.parent].append(unit)
    events, sharded, post_forward = [], {}, []
    for unit in units:
        for group in unit.groups:
            sharded[id(group)] = True  # between steps every group is sharded

    def gather(group, phase):
        if sharded[id(group)] and group.all_gather is not None:
            events.append(("all_gather", group, phase))
        sharded[id(group)] = False

    def forward(unit):
        for group in unit.groups:
            gather(group, "forward")
        for target in unit.forward_prefetch:
            for group in by_name[target].groups:
                gather(group, "forward")
        for child in children[unit.name]:
            forward(child)
        for group in unit.groups:
            post_forward.append(group)
            if group.regather is not None:
                sharded[id(group)] = True

    index = {}

    def default_target(group, unit):
        at = index[id(group)]
        if at == 0:
            return None
        return post_forward[max(at - unit.prefetch_limit, 0)]

    def prefetch(target):
        if target is not None and sharded[id(target)] and target.regather is not None:
            gather(target, "backward")

    # A group stays gathered here for the rest of the step once its backward began. FSDP reshards it
    # after its reduce-scatter, but nothing gathers it again in that step: FSDP1 clears its
    # _needs_pre_backward_unshard, and FSDP2's default targets come later in backward order.
    def backward(unit):
        default = unit.backward_prefetch is None
        for group in unit.groups:
            if group.regather is not None:
                gather(group, "backward")
            if default and unit.prefetch_at == "pre":
                prefetch(default_target(group, unit))
        for target in unit.backward_prefetch or ():
            for group in reversed(by_name[target].groups):
                prefetch(group)
        for child in reversed(children[unit.name]):
            backward(child)
        for group in reversed(unit.groups):
            if default and unit.prefetch_at == "post":
                prefetch(default_target(group, unit))
            if group.reduces and group.reduce_scatter is not None:
                events.append(("reduce_scatter", group, "backward"))

    for root in roots:
        forward(root)
    index.update((id(group), i) for i, group in enumerate(post_forward))
    for root in reversed(roots):
        backward(root)
    return events


# --- FSDP: from the wrapped model to the table ---------------------------------------------------


class _Collective:
    """One collective a group issues per step: kind, the process group it runs on, its whole count
    and torch dtype, and bits (a torch.bool tensor of count elements), or None with `reason` when the
    layout cannot be mapped exactly (count or dtype may then be None: unknown). pruned: elements the
    parameters' masks prune (padding not counted)."""

    def __init__(self, kind, label, comm, count, dtype, bits=None, pruned=0, reason=None):
        self.kind, self.label, self.comm, self.count, self.dtype = kind, label, comm, count, dtype
        self.bits, self.pruned, self.reason = bits, pruned, reason

    @property
    def shape(self):
        return (self.kind, self.count, self.dtype)


def _module_names(model):
    return {id(module): _clean_name(name) for name, module in model.named_modules()}


def _param_name(names, module, param_name):
    """A parameter's name as model.named_parameters() gives it (wrapper prefixes removed)."""
    if id(module) not in names:
        raise SieveError(_ERR_INVALID, "FSDP manages a %s.%s that is not part of this model: pass the root module" % (
            type(module).__name__, param_name))
    return "%s.%s" % (names[id(module)], param_name) if names[id(module)] else param_name


def _mask_for(module, param_name, full_name, masks, used):
    """The keep mask of one parameter: torch.nn.utils.prune's <name>_mask buffer for <name>_orig, or
    masks[full_name]; None when it has neither (everything kept)."""
    keep = None
    if param_name.endswith("_orig"):
        keep = getattr(module, "_buffers", {}).get(param_name[:-len("_orig")] + "_mask")
    if full_name in masks:
        given = masks[full_name]
        # sieve.masks_from(model) gives prune's own masks too: the same mask twice is one mask.
        if keep is not None and not (given.numel() == keep.numel() and
                                     bool(given.reshape(-1).ne(0).cpu().eq(keep.reshape(-1).ne(0).cpu()).all())):
            raise SieveError(_ERR_INVALID, "%s is pruned with torch.nn.utils.prune and given another mask in masks: "
                                           "give one mask per parameter" % full_name)
        keep = given
        used.add(full_name)
    return keep


def _pruned_count(keeps):
    return sum(int(k.numel() - k.ne(0).sum()) for k in keeps if k is not None)


def _fsdp2_states(model):
    """The FSDP2 states of the model's modules, in module order (FSDP2's own all_states order), and
    the module each first appears on."""
    seen, found = set(), []
    for module in model.modules():
        getter = getattr(module, "_get_fsdp_state", None)
        if not callable(getter):
            continue
        state = getter()
        if state is None or id(state) in seen:
            continue
        seen.add(id(state))
        found.append((state, module))
    return found


def _state_groups(state):
    groups = getattr(state, "_fsdp_param_groups", None)  # recent FSDP2: several per state (per-parameter meshes)
    if groups is None:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return list(groups)


def _fsdp2_group(group, label, names, masks, used):
    """An FSDP2 FSDPParamGroup as an _FsdpGroup, or None when it issues no all-gather or
    reduce-scatter (replicate(): its mesh has no shard dim; it all-reduces)."""
    import torch
    mesh = group.mesh_info
    comm = getattr(mesh, "shard_process_group", None)
    if comm is None:
        return None
    world_size = int(mesh.shard_mesh_size)
    after = group.post_forward_mesh_info  # None: not resharded after forward (the root, by default)
    regather = None if after is None else ("same" if after == mesh else "other")
    if not getattr(group, "unshard_in_backward", True):
        regather = None
    params = []
    for p in group.fsdp_params:
        module, param_name = p._module_info.module, p._module_info.param_name
        name = _param_name(names, module, param_name)
        local = getattr(p, "_sharded_local_tensor", None)
        params.append({
            "name": name, "shape": tuple(p._orig_size),
            "dim": getattr(getattr(p, "fsdp_placement", None), "dim", 0),  # FSDP2 before shard_placement_fn: 0
            "padded": tuple(p.padded_sharded_param_size),
            "keep": _mask_for(module, param_name, name, masks, used),
            "gather_dtype": p.param_dtype or p.orig_dtype,
            "trainable": bool(p.sharded_param.requires_grad),
            "reduce_dtype": _reduce_dtype_of(p),
            "tensor_parallel": bool(getattr(p, "is_dtensor", False)),
            "extension": local is not None and hasattr(local, "fsdp_pre_all_gather"),
        })
    if not params:
        return None

    def collective(kind, members, dtype):
        count = world_size * sum(_numel(p["padded"]) for p in members)
        reason = None
        if any(p["tensor_parallel"] for p in members):
            reason = "tensor-parallel (DTensor) parameters: their local tensors are TP shards of the masks"
        else:
            for p in members:
                expected = _padded_shard_shape(p["shape"], p["dim"], world_size)
                if expected != p["padded"]:
                    reason = "%s: FSDP pads its shard to %s, this mapping expects %s" % (
                        p["name"], p["padded"], expected)
                    break
        if reason:
            return _Collective(kind, label, comm, count, dtype, reason=reason)
        keeps = [p["keep"] for p in members]
        bits = fsdp2_layout([p["shape"] for p in members], world_size, [
            _keep_of(k, p["shape"], p["name"]) if k is not None else None for k, p in zip(keeps, members)],
            [p["dim"] for p in members])
        return _Collective(kind, label, comm, bits.numel(), dtype, bits, _pruned_count(keeps))

    gather_dtypes = {p["gather_dtype"] for p in params}
    if any(p["extension"] for p in params):
        # fsdp_pre_all_gather (float8 training, say) decides what is gathered: count and dtype unknown.
        all_gather = _Collective("all_gather", label, comm, None, None,
                                 reason="an all-gather extension (fsdp_pre_all_gather) decides what is gathered")
    elif len(gather_dtypes) != 1:
        nbytes = world_size * sum(_numel(p["padded"]) * _itemsize(p["gather_dtype"]) for p in params)
        all_gather = _Collective("all_gather", label, comm, nbytes, torch.uint8,
                                 reason="parameters of several dtypes, which FSDP all-gathers as bytes")
    else:
        all_gather = collective("all_gather", params, gather_dtypes.pop())
    trainable = [p for p in params if p["trainable"]]
    reduce_scatter = None
    if trainable:
        reduce_dtypes = {p["reduce_dtype"] for p in trainable}
        if len(reduce_dtypes) > 1 and _promotes_reduce_dtypes(group):
            reduce_dtypes = {functools.reduce(torch.promote_types, reduce_dtypes)}
        if len(reduce_dtypes) != 1:
            raise SieveError(_ERR_INVALID, "group %s reduces gradients of several dtypes %s, which FSDP refuses" % (
                label, sorted(str(d) for d in reduce_dtypes)))
        reduce_scatter = collective("reduce_scatter", trainable, reduce_dtypes.pop())
    return _FsdpGroup(label, regather, bool(trainable), all_gather, reduce_scatter)


def _reduce_dtype_of(p):
    """The dtype FSDP2 reduces a parameter's gradient in. PyTorch 2.15: its unsharded_grad_dtype
    (mp_policy.reduce_dtype, else the parameter's grad_dtype, else its own dtype: fp32 for an fp32
    parameter under param_dtype=bf16; an explicit grad_dtype=None, the compute dtype). 2.11:
    reduce_dtype, else an explicit grad_dtype, else param_dtype."""
    if hasattr(type(p), "unsharded_grad_dtype"):
        return p.unsharded_grad_dtype or p.param_dtype or p.orig_dtype
    return p.reduce_dtype or getattr(p, "_explicit_grad_dtype", None) or p.param_dtype or p.orig_dtype


def _promotes_reduce_dtypes(group):
    # PyTorch 2.15 reduces a group whose gradients differ in dtype in their promoted dtype
    # (FSDPParamGroup._get_reduce_dtype); 2.11 refuses such a group.
    return hasattr(group, "_get_reduce_dtype")


def _numel(shape):
    count = 1
    for size in shape:
        count *= int(size)
    return count


def _itemsize(dtype):
    import torch
    return torch.empty((), dtype=dtype).element_size()


def _padded_shard_shape(shape, dim, world_size):
    shape = list(shape)
    dim %= len(shape)
    shape[dim] = -(-shape[dim] // world_size)
    return tuple(shape)


def _fsdp2_units(model, masks, used, forward_order):
    """FSDP2's states as _FsdpUnit in forward order (module order, or forward_order's)."""
    found = _fsdp2_states(model)
    if not found:
        return None
    names = _module_names(model)
    for state, module in found:
        if getattr(state, "_is_root", None) is None:
            raise SieveError(_ERR_INVALID, "FSDP2 has not initialised %s yet: run one training step first (FSDP2 "
                                           "decides its root, its dtypes and what reshards at the first forward)" % (
                                               names.get(id(module)) or "the root"))
    key = {id(state): "%s#%d" % (names.get(id(module)) or "<root>", i) for i, (state, module) in enumerate(found)}
    by_module = {}
    for state, module in found:
        for m in tuple(getattr(state, "_modules", ()) or ()) + (module,):
            by_module[id(m)] = state
    parents = _parents(model)
    units = []
    for state, module in _ordered(found, forward_order, by_module):
        label = names.get(id(module)) or "<root>"
        groups = []
        for i, g in enumerate(_state_groups(state)):
            group = _fsdp2_group(g, label if i == 0 else "%s[%d]" % (label, i), names, masks, used)
            if group is not None:
                groups.append(group)
        parent = _parent_state(module, parents, by_module, state)

        def keys(states, what):
            if any(id(s) not in key for s in states):
                raise SieveError(_ERR_INVALID, "%s prefetches (%s) a module outside this model" % (label, what))
            return [key[id(s)] for s in states]
        explicit_bwd = list(getattr(state, "_states_to_backward_prefetch", ()) or ())  # empty: FSDP's default
        units.append(_FsdpUnit(
            key[id(state)], groups, key[id(parent)] if parent is not None else None,
            forward_prefetch=keys(getattr(state, "_states_to_forward_prefetch", ()) or (), "forward"),
            backward_prefetch=keys(explicit_bwd, "backward") if explicit_bwd else None, prefetch_at="pre"))
    return units


def _ordered(found, forward_order, by_module):
    """found (state, module) pairs in forward order: module order, or the order of forward_order's
    modules (each must carry an FSDP unit of this model, every unit exactly once)."""
    if forward_order is None:
        return found
    module_of = {id(state): module for state, module in found}
    ordered, seen = [], set()
    for module in forward_order:
        state = by_module.get(id(module))
        if state is None:
            raise SieveError(_ERR_INVALID, "forward_order names a %s that is no FSDP unit of this model" % (
                type(module).__name__,))
        if id(state) in seen:
            raise SieveError(_ERR_INVALID, "forward_order names one FSDP unit twice")
        seen.add(id(state))
        ordered.append((state, module_of[id(state)]))
    if len(ordered) != len(found):
        raise SieveError(_ERR_INVALID,
                         "forward_order names %d FSDP units, the model has %d" % (len(ordered), len(found)))
    return ordered


def _parents(model):
    """id(module) -> the module that holds it (the first, for a module held twice)."""
    parents = {}
    for module in model.modules():
        for child in module.children():
            parents.setdefault(id(child), module)
    return parents


def _parent_state(module, parents, by_module, own):
    """The state of the nearest module above `module` that carries another state, or None."""
    node = parents.get(id(module))
    while node is not None:
        state = by_module.get(id(node))
        if state is not None and state is not own:
            return state
        node = parents.get(id(node))
    return None


def _fsdp1_handle(module):
    handle = getattr(module, "_handle", None)
    if handle is None:
        handles = getattr(module, "_handles", None) or []  # PyTorch before 2.1: a list of at most one
        if len(handles) > 1:
            raise SieveError(_ERR_INVALID, "an FSDP1 instance with %d FlatParameters: not mapped" % len(handles))
        handle = handles[0] if handles else None
    return handle


def _fsdp1_instances(model):
    """(instance, handle) for every FullyShardedDataParallel module (the wrapper: it holds
    _fsdp_wrapped_module) in module order; handle None for one that manages no parameter."""
    return [(m, _fsdp1_handle(m)) for m in model.modules() if hasattr(m, "_fsdp_wrapped_module")]


_RESHARD_AFTER_FORWARD = ("FULL_SHARD", "HYBRID_SHARD")
_SHARDED = _RESHARD_AFTER_FORWARD + ("SHARD_GRAD_OP", "_HYBRID_SHARD_ZERO2")


def _fsdp1_group(instance, handle, label, names, masks, used):
    """An FSDP1 FlatParameter as an _FsdpGroup, or None when it issues no all-gather or
    reduce-scatter (NO_SHARD all-reduces its gradient)."""
    strategy = getattr(handle._sharding_strategy, "name", str(handle._sharding_strategy))
    if strategy not in _SHARDED:
        return None
    flat = handle.flat_param
    world_size = int(handle.world_size)
    comm = instance.process_group
    infos, shapes = list(flat._param_infos), list(flat._shapes)
    numels = list(getattr(flat, "_numels_with_padding", None) or flat._numels)
    padding = list(getattr(flat, "_is_padding_mask", None) or [False] * len(numels))
    keeps = []
    for info, shape in zip(infos, shapes):
        name = _param_name(names, info.module, info.param_name)
        keep = _mask_for(info.module, info.param_name, name, masks, used)
        keeps.append(_keep_of(keep, shape, name) if keep is not None else None)
    pruned = _pruned_count(keeps)
    gather_dtype = getattr(handle, "_fwd_bwd_param_dtype", None) or flat.dtype
    reduce_dtype = getattr(handle, "_reduce_dtype", None) or gather_dtype

    def collective(kind, dtype, keep_padding):
        bits = fsdp1_layout(numels, world_size, keeps, padding, keep_padding=keep_padding)
        expected = getattr(flat, "_padded_unsharded_size", None)
        if expected is not None and _numel(expected) != bits.numel():
            return _Collective(kind, label, comm, _numel(expected), dtype,
                               reason="its padded flat parameter has %d elements, this mapping expects %d" % (
                                   _numel(expected), bits.numel()))
        return _Collective(kind, label, comm, bits.numel(), dtype, bits, pruned)

    regather = "same" if not instance._is_root and strategy in _RESHARD_AFTER_FORWARD else None
    reduces = bool(flat.requires_grad)
    return _FsdpGroup(label, regather, reduces, collective("all_gather", gather_dtype, True),
                      collective("reduce_scatter", reduce_dtype, False) if reduces else None)


def _fsdp1_units(model, masks, used, forward_order):
    """FSDP1's instances with a FlatParameter as _FsdpUnit in forward order: forward_order's, else the
    order FSDP recorded in its first iteration, else module order."""
    found = [(m, h) for m, h in _fsdp1_instances(model)]
    if not found:
        return None
    names = _module_names(model)
    for instance, _ in found:
        if getattr(instance, "_is_root", None) is None:
            raise SieveError(_ERR_INVALID, "FSDP has not initialised %s yet: run one training step first (FSDP "
                                           "decides its root at the first forward)" % (
                                               names.get(id(instance)) or "the root"))
    by_module = {}
    for instance, _ in found:
        by_module[id(instance)] = instance
        by_module[id(instance._fsdp_wrapped_module)] = instance
    pairs = [(instance, instance) for instance, _ in found]
    if forward_order is None:
        recorded = _recorded_order(found)
        if recorded is not None:
            forward_order = recorded
    pairs = _ordered(pairs, forward_order, by_module)
    handle_of = {id(m): h for m, h in found}
    parents = _parents(model)
    units, key = [], {id(m): "%s#%d" % (names.get(id(m)) or "<root>", i) for i, (m, _) in enumerate(found)}
    with_handles = [m for m, _ in pairs if handle_of[id(m)] is not None]  # FSDP1's pre-forward order
    for instance, _ in pairs:
        handle = handle_of[id(instance)]
        label = names.get(id(instance)) or "<root>"
        group = _fsdp1_group(instance, handle, label, names, masks, used) if handle is not None else None
        parent = _parent_state(instance, parents, by_module, instance)
        mode = getattr(getattr(instance, "backward_prefetch", None), "name", None)
        exec_order = getattr(instance, "_exec_order_data", None)
        following = []
        if getattr(instance, "forward_prefetch", False) and handle is not None:
            # get_handle_to_forward_prefetch: _forward_prefetch_limit handles ahead, at most the last.
            at, reach = with_handles.index(instance), int(getattr(exec_order, "_forward_prefetch_limit", 1) or 1)
            if at + 1 < len(with_handles):
                following = [key[id(with_handles[min(at + reach, len(with_handles) - 1)])]]
        units.append(_FsdpUnit(
            key[id(instance)], [group] if group is not None else [], key[id(parent)] if parent is not None else None,
            forward_prefetch=following, backward_prefetch=None,
            prefetch_at={"BACKWARD_PRE": "pre", "BACKWARD_POST": "post"}.get(mode),
            prefetch_limit=int(getattr(exec_order, "_backward_prefetch_limit", 1) or 1)))
    return units


def _recorded_order(found):
    """The instances in the pre-forward order FSDP1 recorded in its first iteration, or None when
    there is no complete record."""
    exec_order = getattr(found[0][0], "_exec_order_data", None)
    recorded = list(getattr(exec_order, "handles_pre_forward_order", None) or [])
    instance_of = {id(h): m for m, h in found if h is not None}
    order = []
    for entry in recorded:
        handle = entry[0] if isinstance(entry, tuple) and entry else entry  # before 2.1: tuples of handles
        if id(handle) not in instance_of:
            return None
        order.append(instance_of.pop(id(handle)))
    if instance_of or not order:
        return None
    # An instance without a FlatParameter is not recorded. The root's forward runs first; another's
    # place among its siblings is unknown, so module order it is.
    rest = [m for m, h in found if h is None]
    if any(not m._is_root for m in rest):
        return None
    return rest + order


# What publish_fsdp withheld is a fact about the model (also in its result's "skipped"), not a misuse of
# the API: an operational notice, for the "sieve" logger.
_log = logging.getLogger("sieve")
_said_once = set()


def _say_once(message: str) -> None:
    """Logs once per process each distinct message: publish_fsdp runs every time masks change, and a
    skip it reported once is known."""
    if message not in _said_once:
        _said_once.add(message)
        _log.warning("sieve.publish_fsdp: %s", message)


def _fsdp_plan(model, masks=None, forward_order=None, all_gather=True):
    """What publish_fsdp publishes: ([(process group, [_Collective in publish order])], [skip
    messages]). Every rank computes the same plan from the same model structure and masks."""
    masks = dict(masks or {})
    for name in masks:
        if not isinstance(name, str):
            raise SieveError(_ERR_INVALID, "masks are keyed by parameter name (model.named_parameters()), not %s" % (
                type(name).__name__,))
    used = set()
    units2 = _fsdp2_units(model, masks, used, forward_order)
    units1 = _fsdp1_units(model, masks, used, forward_order)
    if units2 and units1:
        raise SieveError(_ERR_INVALID, "the model mixes FSDP2 (fully_shard) and FSDP1 (FullyShardedDataParallel)")
    units = units2 or units1
    if not units:
        raise SieveError(_ERR_INVALID, "no FSDP unit in this model: wrap it with fully_shard or "
                                       "FullyShardedDataParallel (for DDP use publish_pruned_model)")
    unknown = sorted(set(masks) - used)
    if unknown:
        raise SieveError(_ERR_INVALID, "masks names %s, which no FSDP unit of this model holds" % ", ".join(unknown))

    step = []  # (comm, collective) as one step issues them
    for kind, group, phase in _issue_order(units):
        if kind == "all_gather" and phase == "backward" and group.regather == "other":
            continue  # reshard_after_forward=int: gathered on the post-forward mesh's communicator
        step.append(group.all_gather if kind == "all_gather" else group.reduce_scatter)
    skipped = []
    publish = _exact_shapes(step, all_gather, skipped)
    sequences, position = [], {}  # [(comm, [collective])], communicators in order of first appearance
    for entry in step:
        if id(entry.comm) not in position:
            position[id(entry.comm)] = len(sequences)
            sequences.append((entry.comm, []))
        if entry.shape in publish:
            sequences[position[id(entry.comm)]][1].append(entry)
    return sequences, skipped


def _labels(entries):
    seen = []
    for entry in entries:
        if entry.label not in seen:
            seen.append(entry.label)
    return ", ".join(seen)


def _exact_shapes(step, all_gather, skipped):
    """The shapes (kind, count, dtype) whose masks can be published without ever giving a call a
    mask that is not its own. A call takes the next entry of its shape, and a commit activates the
    whole staged table on its communicator, so a shape is published whole, for one communicator, or
    not at all. Withheld: a shape with an unmapped collective (all-gathers of unknown shape withhold
    every all-gather); a shape that runs on several communicators; a shape none of whose collectives
    prunes a parameter element (no gain). The first two are added to `skipped`."""
    kinds = ("all_gather", "reduce_scatter") if all_gather else ("reduce_scatter",)
    step = [e for e in step if e.kind in kinds]
    unknown = [e for e in step if e.count is None]
    if unknown:
        skipped.append("all-gathers of %s: %s; every all-gather runs dense" % (_labels(unknown), unknown[0].reason))
        step = [e for e in step if e.kind != "all_gather"]
    by_shape = {}
    for entry in step:
        by_shape.setdefault(entry.shape, []).append(entry)
    publish = set()
    for shape, same in by_shape.items():
        what = "%ss of %d x %s" % (shape[0].replace("_", "-"), shape[1], str(shape[2]).replace("torch.", ""))
        unmapped = [e for e in same if e.bits is None]
        if unmapped:
            skipped.append("%s: %s; every one of %s runs dense" % (_labels(unmapped), unmapped[0].reason, what))
        elif len({id(e.comm) for e in same}) > 1:
            skipped.append("%s run on several communicators (%s); they run dense" % (what, _labels(same)))
        elif any(e.pruned for e in same):
            publish.add(shape)
    return publish


def publish_fsdp(model: torch.nn.Module, group: torch.distributed.ProcessGroup | None = None, commit_now: bool = True,
                 union: bool = False, masks: Mapping[str, torch.Tensor] | None = None,
                 forward_order: Sequence[torch.nn.Module] | None = None, all_gather: bool = True) -> dict[str, Any]:
    """Publishes the masks of an FSDP-wrapped model's collectives, then commits them. Every rank calls
    it at the same point, between training steps (after optimizer.step(), before the next forward),
    after at least one full step. Returns dict(all_gather, reduce_scatter: masks published;
    skipped: what was withheld and why; groups: the process groups; commits: commit()'s results).

    model: the root module, wrapped with FSDP2 (fully_shard; written against PyTorch 2.11's source)
    or FSDP1 (FullyShardedDataParallel with a sharded strategy). Masks: every torch.nn.utils.prune
    reparametrization (parameter <name>_orig, buffer <name>_mask) and `masks`, {parameter name as
    model.named_parameters() gives it, FSDP1's wrapper prefixes removed: keep tensor of its full
    shape}, for instance semi_structured_masks(model) taken before sharding. Buffers are not sharded,
    so every rank holds every full mask and computes every rank's part; they must be equal on every
    rank (union=True commits their OR instead).

    What it publishes, per parameter group (FSDP2 fully_shard unit / FSDP1 FlatParameter), as masks
    that name the collective (docs/DESIGN.md, "Masks that name a collective"):
    - an all-gather mask, the group's parameters in the dtype FSDP gathers them (mp_policy.param_dtype;
      FSDP1: mixed_precision.param_dtype), over the whole gathered buffer: only kept elements travel
      and the gathered copy holds exact zeros where masks prune. For a prune reparametrization that
      is <name>_orig's unsharded copy: <name> = <name>_orig * <name>_mask is unchanged (a pruned
      product's zero may lose its sign), the sharded <name>_orig the optimizer and state_dict see is
      untouched; code that reads the unsharded <name>_orig itself sees zeros there. all_gather=False
      publishes none.
    - a reduce-scatter mask, the gradients in the dtype FSDP reduces them (mp_policy.reduce_dtype,
      else on PyTorch 2.15 the parameter's own dtype and on 2.11 param_dtype; FSDP1:
      mixed_precision.reduce_dtype, else param_dtype), over the whole input: a pruned
      parameter's gradient is exactly zero where its mask prunes (for `masks`, the caller's promise).
    The layouts are fsdp2_layout's and fsdp1_layout's (their docstrings say what they assume);
    padding is pruned, except FSDP1's alignment padding in all-gathers (it holds a filler value).

    Which mask a call gets. A communicator uses a collective mask only where the call's shape (kind,
    count, dtype) names it for certain: the one committed mask of that shape, or several that are all
    equal. Shapes shared by groups pruned differently (identical transformer blocks) run dense on
    every rank, since a step may skip or repeat a collective and no order can say which mask is
    whose; use sieve.fsdp.compact(model) (FSDP2's custom collectives) to compact those exactly. So a
    step that skips a parameter, a group that does not run, an eval forward or gradient
    accumulation never makes a call take another group's mask: a call whose shape no mask names runs
    dense. The masks are published in the order _issue_order predicts for one step; the order is
    not what matches them (FSDP1 with forward_prefetch issues its backward reduce-scatters in
    another order, measured on PyTorch 2.11, and every call still takes its own shape's mask).
    SIEVE_PROXY_VERIFY=1 reports a mask that does not fit its data.

    Withheld, and said so once (a wrong mask silently drops gradients or parameters): a shape with
    any collective whose layout is not mapped exactly (tensor-parallel DTensor parameters; all-gather
    extensions; parameters of several dtypes, gathered as bytes), every one of that shape; shapes that
    run on several communicators. Withheld silently: shapes with nothing pruned (no gain). Not
    published at all: NO_SHARD and replicate() (all-reduces), the re-gathers of
    reshard_after_forward=int (another communicator), HSDP's replica all-reduce.

    group: the process group to commit on; None: the ones FSDP runs these collectives on (each
    committed in turn). commit_now=False leaves the commit to the caller. Publishing again first
    retracts what was published for this model. It raises SieveError only for what every rank sees
    alike (the model's structure, the masks), so no rank enters the commit alone.
    """
    plan, skipped = _fsdp_plan(model, masks, forward_order, all_gather)
    for message in skipped:
        _say_once(message)
    previous = _fsdp_published.pop(id(model), None)
    for mask_id in previous["ids"] if previous else ():
        _retract_id(mask_id)
    ids, counts = [], {"all_gather": 0, "reduce_scatter": 0}
    for comm, entries in plan:
        for entry in entries:
            mask_id = _publish_collective_bits(entry.kind, entry.count, _dtype_code_of(entry.dtype),
                                               _packbits(entry.bits))
            if mask_id:  # 0: no Sieve in this process, nothing published
                ids.append(mask_id)
                counts[entry.kind] += 1
    groups = [comm for comm, _ in plan]
    _fsdp_published[id(model)] = {"ids": ids, "groups": groups}
    commits = []
    if commit_now:
        for target in ([group] if group is not None else groups):
            commits.append(commit(group=target, union=union))
    return {"all_gather": counts["all_gather"], "reduce_scatter": counts["reduce_scatter"], "skipped": skipped,
            "groups": groups, "commits": commits}
