"""Python binding of Sieve's C API (sieve.h) through ctypes: no build step.

Finds the loaded libnccl-net-sieve.so (LD_PRELOAD puts it in the process), publishes the sparsity
masks of tensors so the collective proxy all-reduces only their kept elements, and reads the
process's counters.

    import sieve
    sieve.publish_pruned_model(ddp_model.module)   # every rank, after the second backward
    print(sieve.stats())

DDP settings the proxy needs (see publish_pruned_model): gradient_as_bucket_view=True, so that each
parameter's .grad *is* a view into the bucket NCCL all-reduces and a mask published for the grad
covers the bucket; publish after the second backward pass, because DDP rebuilds its buckets (new
addresses) once during the second iteration; publish at the same point on every rank; keep the
gradients alive (optimizer.zero_grad(set_to_none=False)).
"""

import ctypes
import ctypes.util
import os

__all__ = [
    "SieveError", "library", "publish_mask", "publish_ranges", "retract", "query", "stats",
    "publish_pruned_model", "retract_all",
]

_LIBRARY_NAME = "libnccl-net-sieve.so"

# sieve.h dtypes
_DTYPE_F32, _DTYPE_F16, _DTYPE_BF16, _DTYPE_F64, _DTYPE_I8, _DTYPE_U8, _DTYPE_I32, _DTYPE_I64 = range(8)


class SieveError(RuntimeError):
    """A failed C API call: code is the negative SIEVE_ERR_* value."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _MaskInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("mask_id", ctypes.c_uint64), ("count", ctypes.c_uint64),
                ("kept", ctypes.c_uint64), ("hash", ctypes.c_uint64), ("dtype", ctypes.c_int)]


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "bytes_logical_sent", "bytes_wire_sent", "bytes_logical_received", "bytes_wire_received",
        "messages_sent", "messages_received", "collectives_dense", "collectives_compacted",
        "mask_violations", "connections_rejected", "masks_published")]


def _loaded_path():
    """The path of the Sieve library already mapped into this process, if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.endswith(_LIBRARY_NAME):
                    return path
    except OSError:
        pass
    return None


def _find_library():
    candidates = [os.environ.get("SIEVE_LIBRARY"), _loaded_path(), ctypes.util.find_library("nccl-net-sieve")]
    for path in candidates:
        if path:
            return path
    raise SieveError(-8, "libnccl-net-sieve.so not found: LD_PRELOAD it, or set SIEVE_LIBRARY to its path")


_lib = None


def library():
    """The loaded C library (found once: SIEVE_LIBRARY, then the mapped copy, then the linker path)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(_find_library())
        lib.sieve_version.restype = ctypes.c_char_p
        lib.sieve_strerror.restype = ctypes.c_char_p
        lib.sieve_strerror.argtypes = [ctypes.c_int]
        lib.sieve_last_error.restype = ctypes.c_char_p
        lib.sieve_mask_publish.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p,
                                           ctypes.POINTER(ctypes.c_uint64)]
        lib.sieve_mask_publish_ranges.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
        lib.sieve_mask_retract.argtypes = [ctypes.c_void_p]
        lib.sieve_mask_query.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MaskInfo)]
        lib.sieve_stats_get.argtypes = [ctypes.POINTER(_Stats)]
        _lib = lib
    return _lib


def _check(code):
    if code != 0:
        lib = library()
        raise SieveError(code, "%s: %s" % (lib.sieve_strerror(code).decode(), lib.sieve_last_error().decode()))


def _dtype_code(tensor):
    import torch
    codes = {torch.float32: _DTYPE_F32, torch.float16: _DTYPE_F16, torch.bfloat16: _DTYPE_BF16,
             torch.float64: _DTYPE_F64, torch.int8: _DTYPE_I8, torch.uint8: _DTYPE_U8, torch.int32: _DTYPE_I32,
             torch.int64: _DTYPE_I64}
    if tensor.dtype not in codes:
        raise SieveError(-2, "unsupported tensor dtype %s" % tensor.dtype)
    return codes[tensor.dtype]


def _buffer(tensor):
    if not tensor.is_contiguous():
        raise SieveError(-1, "the tensor must be contiguous (a mask describes consecutive elements)")
    if tensor.numel() == 0:
        raise SieveError(-1, "the tensor has no elements")
    return ctypes.c_void_p(tensor.data_ptr()), tensor.numel(), _dtype_code(tensor)


def _packbits(keep):
    """keep: a tensor of any dtype (nonzero = kept) -> LSB-first bitmap bytes."""
    import numpy
    flat = keep.detach().reshape(-1).ne(0).to("cpu").numpy()
    return numpy.packbits(flat, bitorder="little").tobytes()


def publish_mask(tensor, keep):
    """Publishes which elements of `tensor` are kept (keep: same number of elements, nonzero = kept).
    Returns the mask id. The address is what counts: publish the tensor NCCL will all-reduce."""
    base, count, dtype = _buffer(tensor)
    if keep.numel() != count:
        raise SieveError(-1, "mask has %d elements, the tensor %d" % (keep.numel(), count))
    mask_id = ctypes.c_uint64(0)
    _check(library().sieve_mask_publish(base, count, dtype, _packbits(keep), ctypes.byref(mask_id)))
    return mask_id.value


def publish_ranges(tensor, ranges):
    """Publishes kept elements as (start, length) pairs. Returns the mask id."""
    base, count, dtype = _buffer(tensor)
    n = len(ranges)
    starts = (ctypes.c_uint64 * max(n, 1))(*[int(s) for s, _ in ranges])
    lengths = (ctypes.c_uint64 * max(n, 1))(*[int(l) for _, l in ranges])
    mask_id = ctypes.c_uint64(0)
    _check(library().sieve_mask_publish_ranges(base, count, dtype, starts, lengths, n, ctypes.byref(mask_id)))
    return mask_id.value


def retract(tensor):
    """Removes the mask published for `tensor` (its exact data address)."""
    _check(library().sieve_mask_retract(ctypes.c_void_p(tensor.data_ptr())))


def query(tensor):
    """What is published for `tensor`: dict(mask_id, count, kept, hash, dtype)."""
    info = _MaskInfo(size=ctypes.sizeof(_MaskInfo))
    _check(library().sieve_mask_query(ctypes.c_void_p(tensor.data_ptr()), ctypes.byref(info)))
    return {name: getattr(info, name) for name in ("mask_id", "count", "kept", "hash", "dtype")}


def stats():
    """The process's counters as a dict (sieve_stats_t's fields)."""
    s = _Stats(size=ctypes.sizeof(_Stats))
    _check(library().sieve_stats_get(ctypes.byref(s)))
    return {name: getattr(s, name) for name, _ in _Stats._fields_[1:]}


def _pruned_parameters(model):
    """(name, parameter, mask) for every torch.nn.utils.prune reparametrization in the model: the
    trainable tensor is <name>_orig and the mask the buffer <name>_mask."""
    for module_name, module in model.named_modules():
        buffers = dict(module.named_buffers(recurse=False))
        for param_name, param in module.named_parameters(recurse=False):
            if param_name.endswith("_orig"):
                mask = buffers.get(param_name[:-len("_orig")] + "_mask")
                if mask is not None:
                    yield ("%s.%s" % (module_name, param_name)).lstrip("."), param, mask


# Addresses publish_pruned_model published, per model: DDP moves gradients when it rebuilds its
# buckets, and a mask left at an old address could later describe some other tensor placed there.
_published_by_model = {}


def _retract_addresses(addresses):
    lib = library()
    for address in addresses:
        lib.sieve_mask_retract(ctypes.c_void_p(address))  # NOT_FOUND is fine: already replaced


def publish_pruned_model(model, require_grads=True):
    """Publishes, for every parameter pruned with torch.nn.utils.prune, its mask on the parameter's
    gradient: the gradient of a pruned weight is exactly zero there while the reparametrization is
    active. Returns the number of masks published.

    For DDP, pass the wrapped module (ddp.module) and construct DDP with gradient_as_bucket_view=True:
    then every .grad is a view into the bucket that NCCL all-reduces, and the bucket's mask is the
    union of its gradients' masks (unpruned parameters stay dense). Call it on every rank at the same
    point, after the *second* backward pass: DDP rebuilds its buckets once during the second
    iteration, which moves every gradient; call it again whenever a mask changes or buckets move
    (it first retracts what it published for this model before). Keep gradients alive: use
    optimizer.zero_grad(set_to_none=False), or the bucket views are dropped. Without
    gradient_as_bucket_view DDP copies gradients into separate buckets that no mask covers, and the
    proxy simply runs dense.
    """
    pruned = list(_pruned_parameters(model))
    if require_grads:
        for name, param, _ in pruned:
            if param.grad is None:
                raise SieveError(-1, "%s has no gradient yet: publish after the first backward pass" % name)
    _retract_addresses(_published_by_model.pop(id(model), []))
    addresses = []
    for _, param, mask in pruned:
        if param.grad is not None:
            publish_mask(param.grad, mask)
            addresses.append(param.grad.data_ptr())
    _published_by_model[id(model)] = addresses
    return len(addresses)


def retract_all(model):
    """Retracts the masks publish_pruned_model published for this model, wherever they were."""
    _retract_addresses(_published_by_model.pop(id(model), []))
