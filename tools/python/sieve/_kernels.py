# SPDX-License-Identifier: Apache-2.0
"""Gather and scatter of a mask's kept elements, for the hooks that compact buffers themselves (sieve.ddp).

On a CUDA tensor, where the library in reach was built with CUDA (sieve_capabilities() has
SIEVE_CAP_CUDA_COMPACT), they are Sieve's own kernels (sieve_compact_gather / sieve_compact_scatter, the
collective proxy's compress/cuda kernels, enqueued on the tensor's current stream). On a CPU tensor,
where the library in reach has them (SIEVE_CAP_HOST_COMPACT: every build of this version), they are
Sieve's CPU kernels (sieve_compact_gather_host / sieve_compact_scatter_host: runs of kept words copied
whole, vector compress/expand for the rest), on at most torch.get_num_threads() threads. Everywhere
else (no library, an older one) they are torch operations on an index computed once per mask:
index_select into a buffer kept for the next step, and index_copy_; a mask whose kept elements form
few contiguous runs (structured pruning: whole rows, channels, blocks) copies those runs with
narrow/copy_ instead of through an index. Every path moves the same bits.

The library in reach is the one sieve.library() loads (the preloaded copy, else $SIEVE_LIBRARY), else,
where neither is there, the copy this package carries (a wheel's, or cmake --install's): one loader,
one copy per process. The DDP hook needs none, so a missing or unloadable library only means the
torch path.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

from ._constants import _CAP_CUDA_COMPACT, _CAP_HOST_COMPACT
from ._library import SieveError, _library_or_package_copy

if TYPE_CHECKING:
    import torch

__all__ = ["Compaction", "backend_for", "cuda_kernels_available", "host_kernels_available"]

_RUNS_MAX = 64  # at most this many contiguous runs: copied run by run, no index
_lib = None  # the library when it has the compact entry points, False when there is none (tests reset it)


def _library() -> ctypes.CDLL | None:
    """The library (sieve.library()'s copy, loaded by its one loader) when it has sieve_compact_*, else
    None (not found, not loadable, or too old)."""
    global _lib
    if _lib is None:
        lib = _library_or_package_copy()
        _lib = lib if lib is not None and hasattr(lib, "sieve_compact_gather") else False
        if _lib and _lib.sieve_capabilities() & _CAP_HOST_COMPACT:  # an older library has no host calls
            for name in ("sieve_compact_gather_host", "sieve_compact_scatter_host"):
                getattr(_lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                                ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                                ctypes.c_void_p, ctypes.c_int]
    return _lib or None


def cuda_kernels_available() -> bool:
    """True when the library in reach runs Sieve's CUDA gather/scatter (built with CUDA)."""
    lib = _library()
    return bool(lib is not None and lib.sieve_capabilities() & _CAP_CUDA_COMPACT)


def host_kernels_available() -> bool:
    """True when the library in reach has Sieve's CPU gather/scatter (sieve_compact_*_host)."""
    lib = _library()
    return bool(lib is not None and lib.sieve_capabilities() & _CAP_HOST_COMPACT)


def backend_for(tensor: torch.Tensor) -> str:
    """"sieve-cuda" or "sieve-host" (Sieve's kernels) or "torch" (the fallback) for a buffer like tensor."""
    if tensor.element_size() not in (2, 4, 8):
        return "torch"
    if tensor.is_cuda:
        return "sieve-cuda" if cuda_kernels_available() else "torch"
    if tensor.device.type == "cpu" and host_kernels_available():
        return "sieve-host"
    return "torch"


def _runs(keep: torch.Tensor) -> list[tuple[int, int]] | None:
    """[(start, length)] of keep's contiguous kept runs when there are at most _RUNS_MAX, else None."""
    import torch
    flat = keep.to(torch.int8)
    edges = torch.diff(flat, prepend=flat.new_zeros(1), append=flat.new_zeros(1))
    starts = (edges == 1).nonzero().reshape(-1)
    if starts.numel() > _RUNS_MAX:
        return None
    ends = (edges == -1).nonzero().reshape(-1)
    return [(int(s), int(e - s)) for s, e in zip(starts.tolist(), ends.tolist())]


class Compaction:
    """One mask's gather and scatter: keep is a 1-D bool tensor (any device) over the buffer."""

    def __init__(self, keep: torch.Tensor) -> None:
        import torch
        self._torch = torch
        keep = keep.detach().reshape(-1).to("cpu", torch.bool)
        self.count = int(keep.numel())
        self.index_cpu = keep.nonzero().reshape(-1)
        self.kept = int(self.index_cpu.numel())
        self._keep = keep
        self.runs = _runs(keep)
        self._by_device = {}  # device -> the index, or the kernels' (bits, tile_base)
        self._compact = {}  # (device, dtype) -> the compact buffer gather fills, reused

    def _index(self, device):
        index = self._by_device.get(("index", device))
        if index is None:
            index = self.index_cpu.to(device)
            self._by_device[("index", device)] = index
        return index

    def _device_layout(self, device):
        """The kernels' mask on device: LSB-first uint32 bit words and the kept elements before each tile."""
        layout = self._by_device.get(("layout", device))
        if layout is None:
            torch = self._torch
            tile = int(_library().sieve_compact_tile_elements())
            words = (self.count + 31) // 32
            tiles = (self.count + tile - 1) // tile
            # One byte per element, whole tiles (a tile is a whole number of words): a bucket of tens
            # of millions of elements costs tens of MB here, not eight bytes per element.
            padded = torch.zeros(tiles * tile, dtype=torch.uint8)
            padded[:self.count] = self._keep.to(torch.uint8)
            shifts = torch.arange(8, dtype=torch.uint8)
            packed = (padded.view(-1, 8) << shifts).sum(1, dtype=torch.uint8)  # LSB first; distinct bits, no carry
            bits = packed[:words * 4].view(torch.int32)  # little-endian: four bytes are one uint32 word
            tile_base = torch.zeros(tiles + 1, dtype=torch.int64)
            tile_base[1:] = padded.view(tiles, tile).sum(1, dtype=torch.int64).cumsum(0)
            layout = (bits.to(device), tile_base.to(device))
            self._by_device[("layout", device)] = layout
        return layout

    def _compact_buffer(self, like):
        key = (like.device, like.dtype)
        compact = self._compact.get(key)
        if compact is None:
            compact = like.new_empty(self.kept)
            self._compact[key] = compact
        return compact

    def _kernel(self, name, src, dst):
        import torch
        bits, tile_base = self._device_layout(src.device)
        stream = torch.cuda.current_stream(src.device).cuda_stream
        code = getattr(_library(), name)(bits.data_ptr(), tile_base.data_ptr(), self.count, self.kept,
                                         src.element_size(), src.data_ptr(), dst.data_ptr(), stream)
        if code != 0:
            lib = _library()
            raise SieveError(code, "%s: %s" % (lib.sieve_strerror(code).decode(), lib.sieve_last_error().decode()))

    def _host(self, name: str, first: int, span: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Sieve's CPU kernel over elements [first, first + span), from src to dst (contiguous; in the C
        call's order: gather reads the buffer into the compact elements, scatter the other way)."""
        bits, tile_base = self._device_layout(src.device)
        lib = _library()
        code = getattr(lib, name)(bits.data_ptr(), tile_base.data_ptr(), self.count, self.kept, src.element_size(),
                                  first, span, src.data_ptr(), dst.data_ptr(), max(1, self._torch.get_num_threads()))
        if code != 0:
            raise SieveError(code, "%s: %s" % (lib.sieve_strerror(code).decode(), lib.sieve_last_error().decode()))

    def _span_of(self, offset: int, length: int) -> Tuple[int, int]:
        """(first, span): the elements that hold kept elements [offset, offset + length) of the compact buffer."""
        first = int(self.index_cpu[offset])
        return first, int(self.index_cpu[offset + length - 1]) + 1 - first

    def gather(self, buffer: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The kept elements of the 1-D contiguous buffer, in order: into `out` (a contiguous tensor of
        `kept` elements and buffer's dtype, e.g. a slice of a larger compact buffer) when given, else
        into a buffer this Compaction reuses at its next gather (the caller is done with it by then:
        DDP waits for every bucket per step)."""
        compact = self._compact_buffer(buffer) if out is None else out
        if compact.numel() != self.kept or compact.dtype != buffer.dtype or not compact.is_contiguous():
            raise ValueError("gather's out must be %d contiguous %s elements" % (self.kept, buffer.dtype))
        if self.kept == 0:
            return compact
        backend = backend_for(buffer)
        if backend == "sieve-cuda":
            self._kernel("sieve_compact_gather", buffer, compact)
        elif backend == "sieve-host" and buffer.is_contiguous():
            self._host("sieve_compact_gather_host", 0, self.count, buffer, compact)
        elif self.runs is not None:
            for start, offset, length in self._run_places():
                compact.narrow(0, offset, length).copy_(buffer.narrow(0, start, length))
        else:
            self._torch.index_select(buffer, 0, self._index(buffer.device), out=compact)
        return compact

    def _run_places(self) -> Iterator[tuple[int, int, int]]:
        """(start in the buffer, offset in the compact buffer, length) of each kept run."""
        offset = 0
        for start, length in self.runs:
            yield start, offset, length
            offset += length

    def pipelines(self, buffer: torch.Tensor) -> bool:
        """True when gather_piece/scatter_piece serve this buffer: the torch index path on the host,
        where gather and scatter are the CPU's own work and pieces let them overlap the wire (on a GPU
        they are kernels on the stream, and runs are plain copies)."""
        return not buffer.is_cuda and self.runs is None

    def pieces(self, elements: int) -> list[tuple[int, int]]:
        """[(offset, length)]: the compact buffer cut into consecutive pieces of `elements` kept
        elements (the last one shorter); a function of the mask alone, so equal on every rank."""
        elements = max(1, int(elements))
        return [(offset, min(elements, self.kept - offset)) for offset in range(0, self.kept, elements)]

    def gather_piece(self, buffer: torch.Tensor, offset: int, length: int,
                     out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Kept elements [offset, offset + length) of the host buffer: into `out` (contiguous, `length`
        elements) when given, else into their own slice of the compact buffer (pieces never share
        one: several may be in flight at once)."""
        piece = self._compact_buffer(buffer).narrow(0, offset, length) if out is None else out
        if length and backend_for(buffer) == "sieve-host" and buffer.is_contiguous() and piece.is_contiguous():
            first, span = self._span_of(offset, length)
            self._host("sieve_compact_gather_host", first, span, buffer, piece)
            return piece
        self._torch.index_select(buffer, 0, self.index_cpu.narrow(0, offset, length), out=piece)
        return piece

    def piece_region(self, offset: int, length: int) -> Tuple[int, int]:
        """(start, end): the part of the buffer a piece of kept elements [offset, offset + length)
        answers for: from its first kept element (the buffer's start for the first piece) to the
        next piece's first (the buffer's end for the last). The pieces' regions tile the buffer."""
        start = 0 if offset == 0 else int(self.index_cpu[offset])
        end = self.count if offset + length >= self.kept else int(self.index_cpu[offset + length])
        return start, end

    def scatter_piece(self, piece: torch.Tensor, buffer: torch.Tensor, offset: int) -> torch.Tensor:
        """Writes a piece back to its kept elements; the pruned ones are the caller's to zero (once,
        after every gather_piece of the buffer)."""
        if piece.dtype != buffer.dtype:
            piece = piece.to(buffer.dtype)
        if piece.numel() and backend_for(buffer) == "sieve-host" and buffer.is_contiguous():
            # The kernel also writes +0 to the pruned elements inside the piece's span (already zero).
            first, span = self._span_of(offset, piece.numel())
            self._host("sieve_compact_scatter_host", first, span, piece.contiguous(), buffer)
            return buffer
        buffer.index_copy_(0, self.index_cpu.narrow(0, offset, piece.numel()), piece)
        return buffer

    def scatter(self, compact: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
        """buffer = compact's values where kept, +0.0 elsewhere (every element written)."""
        if compact.dtype != buffer.dtype:
            compact = compact.to(buffer.dtype)
        backend = backend_for(buffer) if self.kept else "torch"
        if backend == "sieve-cuda":
            self._kernel("sieve_compact_scatter", compact.contiguous(), buffer)
            return buffer
        if backend == "sieve-host" and buffer.is_contiguous():
            self._host("sieve_compact_scatter_host", 0, self.count, compact.contiguous(), buffer)
            return buffer
        buffer.zero_()
        if self.kept == 0:
            return buffer
        if self.runs is not None:
            for start, offset, length in self._run_places():
                buffer.narrow(0, start, length).copy_(compact.narrow(0, offset, length))
        else:
            buffer.index_copy_(0, self._index(buffer.device), compact)
        return buffer
