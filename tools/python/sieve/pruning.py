# SPDX-License-Identifier: Apache-2.0
"""Masks from the tools people prune with, in one call, for every face of Sieve alike:

    masks = sieve.masks_from(model)                      # torch.nn.utils.prune, torch.ao.pruning
    masks = sieve.masks_from(model, "masks.safetensors")  # or a {name: bool tensor}
    sieve.ddp.register(ddp_model, masks=masks)             # DDP communication hook
    sieve.fsdp.compact(model, masks=masks)                 # FSDP2's custom collectives
    sieve.publish_pruned_model(ddp_model.module, masks=masks)  # the preloaded proxy (C API)

What it finds, keyed by the name of the parameter whose gradient the mask covers (the tensor that is
trained, as model.named_parameters() gives it):
- torch.nn.utils.prune: <name>_orig with its buffer <name>_mask; the gradient of <name>_orig is
  grad(<name>) x mask, exactly zero where pruned;
- torch.ao.pruning's sparsifier while the model is prepared (before squash_mask()): the FakeSparsity
  parametrization holds the mask at module.parametrizations.<name>[0].mask and the trained tensor is
  module.parametrizations.<name>.original, whose gradient is again grad x mask;
- `source`: a {name: tensor} (nonzero = kept) or the path of a safetensors file of BOOL or U8 tensors
  (the file sieve_mask_publish_file and sieve-bench --masks take). A name may be the parameter's
  (weight_orig, parametrizations.weight.original) or the pruned tensor's (weight), which is resolved
  to the parameter behind it. Such a mask is the caller's promise that those gradients are zero where
  it prunes; Sieve checks it on every call and runs dense where it is broken.

It does not find masks where the gradients at pruned positions are not zero, which no mask can make
exact: torchao's SemiSparseLinear (straight-through backward, a 2:4 pattern recomputed every forward)
and apex ASP (gradients masked only inside optimizer.step, after the all-reduce); docs/PYTORCH.md
says what to do with them.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from typing import TYPE_CHECKING, Mapping, Union

from ._constants import _ERR_INVALID
from ._library import SieveError

if TYPE_CHECKING:
    import torch

__all__ = ["FoundMasks", "masks_from", "read_safetensors_masks"]

_log = logging.getLogger("sieve")

PRUNE, AO_PRUNING, GIVEN, FILE = "torch.nn.utils.prune", "torch.ao.pruning", "given", "safetensors"


class FoundMasks(dict):
    """{parameter name: bool keep tensor of the parameter's shape}, and `sources`: {parameter name:
    where its mask came from (torch.nn.utils.prune, torch.ao.pruning, given, safetensors)}."""

    def __init__(self):
        super().__init__()
        self.sources = {}

    def summary(self) -> str:
        by_source = {}
        for name, source in self.sources.items():
            by_source.setdefault(source, []).append(name)
        if not by_source:
            return "no masks found"
        return "; ".join("%s: %s" % (source, ", ".join(names)) for source, names in sorted(by_source.items()))


def _fake_sparsity(parametrization):
    # torch.ao.pruning's FakeSparsity multiplies by its `mask` buffer: elementwise, so the gradient of
    # `original` is grad x mask. Any other parametrization may mix elements: its mask says nothing.
    return type(parametrization).__name__ == "FakeSparsity" and hasattr(parametrization, "mask")


def _found_on_model(model):
    """(name, keep, source) for every prune reparametrization and prepared FakeSparsity in the model."""
    for module_name, module in model.named_modules():
        prefix = module_name + "." if module_name else ""
        buffers = dict(module.named_buffers(recurse=False))
        for param_name, _ in module.named_parameters(recurse=False):
            if param_name.endswith("_orig"):
                mask = buffers.get(param_name[:-len("_orig")] + "_mask")
                if mask is not None:
                    yield prefix + param_name, mask, PRUNE
        parametrizations = getattr(module, "parametrizations", None)
        if parametrizations is None or not hasattr(parametrizations, "items"):
            continue
        for tensor_name, plist in parametrizations.items():
            if len(plist) == 1 and _fake_sparsity(plist[0]):
                yield "%sparametrizations.%s.original" % (prefix, tensor_name), plist[0].mask, AO_PRUNING
            elif any(_fake_sparsity(p) for p in plist):
                raise SieveError(_ERR_INVALID, "%s%s has FakeSparsity among other parametrizations: the gradient "
                                               "of its original is not masked elementwise" % (prefix, tensor_name))


def _resolve(model, params, name):
    """The trained parameter a given mask's name stands for: itself, or the prune / FakeSparsity
    parameter behind a pruned tensor's name (a.weight -> a.weight_orig, a.parametrizations.weight.original)."""
    if name in params:
        return name
    owner_name, _, attr = name.rpartition(".")
    prefix = owner_name + "." if owner_name else ""
    for candidate in (prefix + attr + "_orig", "%sparametrizations.%s.original" % (prefix, attr)):
        if candidate in params:
            if candidate.endswith(".original"):
                owner = model.get_submodule(owner_name) if owner_name else model
                plist = owner.parametrizations[attr]
                if not all(_fake_sparsity(p) for p in plist):
                    raise SieveError(_ERR_INVALID, "%s is parametrized by %s: a mask of it says nothing of the "
                                                   "gradient of its original" % (name, type(plist[0]).__name__))
            return candidate
    raise SieveError(_ERR_INVALID, "a mask names %s, which the model has no parameter of" % name)


def _add(found, params, name, keep, source):
    import torch
    if not isinstance(keep, torch.Tensor):
        raise SieveError(_ERR_INVALID, "the mask of %s is a %s, not a torch.Tensor" % (name, type(keep).__name__))
    shape = tuple(params[name].shape)
    if keep.numel() != params[name].numel():
        raise SieveError(_ERR_INVALID, "the mask of %s has %d elements, the parameter %s" % (name, keep.numel(), shape))
    keep = keep.detach().ne(0).reshape(shape).cpu()
    if name in found:
        if not torch.equal(found[name], keep):
            raise SieveError(_ERR_INVALID, "%s has two different masks (%s and %s)" % (
                name, found.sources[name], source))
        return
    found[name] = keep
    found.sources[name] = source


def _unwrapped(model):
    """The module a DDP wrapper holds: the faces take parameter names as the module gives them."""
    from torch.nn.parallel import DistributedDataParallel
    return model.module if isinstance(model, DistributedDataParallel) else model


def _parameters(model):
    """{name: parameter}; FSDP1's and torch.compile's wrapper prefixes are not part of a mask's name
    (FSDP2 keeps the names, its DTensors the full shapes)."""
    params = {}
    for name, param in model.named_parameters():
        for wrapper in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
            name = name.replace(wrapper, "")
        params[name] = param
    return params


def masks_from(model: torch.nn.Module, source: Union[None, str, os.PathLike, Mapping[str, torch.Tensor]] = None,
               quiet: bool = False) -> FoundMasks:
    """Every mask of `model` (torch.nn.utils.prune, torch.ao.pruning's FakeSparsity) and of `source`
    (a {name: tensor}, nonzero = kept, or a safetensors file's path), keyed by the name of the
    parameter whose gradient it covers, as a FoundMasks (a dict; .sources says where each came from).
    Logs one line to the "sieve" logger naming what it found (quiet=True: not). The same on every rank
    for the same model and source. A name the model lacks, a mask of another size, two different masks
    for one parameter, FakeSparsity mixed with other parametrizations: SieveError."""
    model = _unwrapped(model)
    params = _parameters(model)
    found = FoundMasks()
    for name, keep, how in _found_on_model(model):
        _add(found, params, name, keep, how)
    if source is not None:
        if isinstance(source, (str, os.PathLike)):
            given, how = read_safetensors_masks(source), FILE
        elif isinstance(source, Mapping):
            given, how = source, GIVEN
        else:
            raise SieveError(_ERR_INVALID, "masks_from: source is a %s, not a path or a {name: tensor}" % (
                type(source).__name__))
        for name, keep in given.items():
            _add(found, params, _resolve(model, params, str(name)), keep, how)
    if not quiet:
        _log.info("sieve.masks_from: %d masks (%s)", len(found), found.summary())
    return found


# safetensors' header: little-endian u64 length, then that much JSON, {name: {dtype, shape,
# data_offsets: [begin, end) into the data after the header}}, and "__metadata__".
_FILE_DTYPES = ("BOOL", "U8")


def read_safetensors_masks(path: Union[str, os.PathLike]) -> dict[str, torch.Tensor]:
    """{name: bool tensor} of a safetensors file of BOOL or U8 tensors (nonzero = kept), read without
    the safetensors package."""
    import torch
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SieveError(_ERR_INVALID, "%s is not a safetensors file: %d bytes" % (path, len(raw)))
    (length,) = struct.unpack("<Q", raw[:8])
    if length > len(raw) - 8:
        raise SieveError(_ERR_INVALID, "%s: its header says %d bytes, the file has %d" % (path, length, len(raw) - 8))
    try:
        header = json.loads(raw[8:8 + length])
    except ValueError as error:
        raise SieveError(_ERR_INVALID, "%s: its header is not JSON (%s)" % (path, error)) from None
    data = memoryview(raw)[8 + length:]
    masks = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") not in _FILE_DTYPES:
            raise SieveError(_ERR_INVALID, "%s: %s is %s, not a mask (BOOL or U8)" % (path, name, entry.get("dtype")))
        begin, end = entry["data_offsets"]
        shape = [int(n) for n in entry["shape"]]
        count = 1
        for n in shape:
            count *= n
        if not 0 <= begin <= end <= len(data) or end - begin != count:
            raise SieveError(_ERR_INVALID, "%s: %s's bytes [%d, %d) do not hold its shape %s" % (
                path, name, begin, end, shape))
        values = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8) if count else torch.zeros(
            0, dtype=torch.uint8)
        masks[name] = values.ne(0).reshape(shape)
    return masks
