# SPDX-License-Identifier: Apache-2.0
"""Python binding of Sieve's C API (sieve.h) through ctypes: no compiled extension.

Finds the libnccl-net-sieve.so that LD_PRELOAD put into the process, publishes the sparsity masks of
the buffers NCCL will reduce, commits them on a process group (the collective proxy then sends only
the kept elements there) and reads the process's counters.

    import sieve
    sieve.publish_pruned_model(ddp_model.module)   # every rank, same point, after the 2nd backward
    print(sieve.stats())

Publishing and retracting only stage. commit(group) is a collective on that process group: every rank
of it calls it at the same point, and the staged masks become active there only if every rank agrees
on them (docs/DESIGN.md, "How the proxy keeps ranks consistent"). The binding keeps every tensor it
published alive until a commit has released its mask, so no address is reused under a live mask and
the garbage collector decides nothing.

The package, by concern: _library (finding and loading the library), _constants (sieve.h's values),
masks (publish, retract, commit, counters, pruned models), pruning (sieve.masks_from: the masks of
torch.nn.utils.prune, torch.ao.pruning, a dict or a safetensors file, for every face), fsdp_layout
(where FSDP's flat buffers put each parameter), fsdp_masks (FSDP's collectives for the preloaded
proxy), ddp (a DDP communication hook that compacts buckets itself, on any backend, without
LD_PRELOAD), fsdp (FSDP2's custom collectives: sieve.fsdp.compact(model)), _kernels (their gather and
scatter), and `python -m sieve` (__main__: what to set, and a launcher).
"""

from __future__ import annotations

import os
import re

from ._library import SieveError, library, library_path
from .masks import (commit, publish_collective, publish_mask, publish_pruned_model, publish_ranges, query, retract,
                    retract_all, retract_id, stats)
from .fsdp_layout import fsdp1_layout, fsdp2_layout
from .fsdp_masks import publish_fsdp, semi_structured_masks
from .pruning import FoundMasks, masks_from, read_safetensors_masks
from . import ddp  # the DDP communication hook: needs no library, imports torch only when used
from . import _kernels  # noqa: F401 (the hooks' gather/scatter: Sieve's CUDA kernels or torch; torch when used)

__all__ = [
    "SieveError", "library", "library_path", "publish_mask", "publish_ranges", "retract", "commit", "query", "stats",
    "publish_pruned_model", "retract_all", "publish_collective", "retract_id", "publish_fsdp", "fsdp2_layout",
    "fsdp1_layout", "semi_structured_masks", "masks_from", "FoundMasks", "read_safetensors_masks", "ddp", "fsdp",
    "__version__",
]


_PROJECT_VERSION = re.compile(r"project\(sieve VERSION ([0-9]+\.[0-9]+\.[0-9]+)")


def _version() -> str:
    """The release. Its one source is project(VERSION) in CMakeLists.txt; each way of installing the
    package carries it on: cmake --install in _installed.py, a wheel in its metadata (pyproject.toml
    reads CMakeLists.txt), a checkout in CMakeLists.txt itself; else the library's sieve_version()."""
    try:
        from . import _installed
        return str(_installed.VERSION)
    except (ImportError, AttributeError):  # not installed by cmake, or by one older than the record's VERSION
        pass
    from importlib import metadata
    try:
        found = metadata.distribution("nccl-net-sieve")
        # only the distribution that installed this very package: another copy may be installed too
        if os.path.realpath(str(found.locate_file("sieve/__init__.py"))) == os.path.realpath(__file__):
            return found.version
    except metadata.PackageNotFoundError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, os.pardir, os.pardir, os.pardir, "CMakeLists.txt")) as f:
            match = _PROJECT_VERSION.search(f.read())
        if match:
            return match.group(1)
    except OSError:  # not a checkout
        pass
    try:
        return library().sieve_version().decode().split()[0].split("-")[0]
    except SieveError:
        return "unknown"


def __getattr__(name: str) -> object:
    # sieve.fsdp imports torch: only when asked for, so `import sieve` and `python -m sieve` stay quick.
    if name == "fsdp":
        import importlib
        return importlib.import_module(".fsdp", __name__)
    if name == "__version__":  # found once, when first asked for
        globals()["__version__"] = version = _version()
        return version
    raise AttributeError("module 'sieve' has no attribute %r" % name)
