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
masks (publish, retract, commit, counters, pruned models), fsdp_layout (where FSDP's flat buffers put
each parameter), fsdp_masks (FSDP's collectives for the preloaded proxy), ddp (a DDP communication
hook that compacts buckets itself, on any backend, without LD_PRELOAD), fsdp (FSDP2's custom
collectives: sieve.fsdp.compact(model)), _kernels (their gather and scatter), and `python -m sieve`
(__main__: what to set, and a launcher).
"""

from ._library import SieveError, library, library_path
from .masks import (commit, publish_collective, publish_mask, publish_pruned_model, publish_ranges, query, retract,
                    retract_all, retract_id, stats)
from .fsdp_layout import fsdp1_layout, fsdp2_layout
from .fsdp_masks import publish_fsdp, semi_structured_masks
from . import ddp  # the DDP communication hook: needs no library, imports torch only when used
from . import _kernels  # the hooks' gather/scatter: Sieve's CUDA kernels or torch; imports torch only when used

# The release, as CMakeLists.txt's project(VERSION) and sieve_version() say it (a test checks all three).
__version__ = "0.1.0"

__all__ = [
    "SieveError", "library", "library_path", "publish_mask", "publish_ranges", "retract", "commit", "query", "stats",
    "publish_pruned_model", "retract_all", "publish_collective", "retract_id", "publish_fsdp", "fsdp2_layout",
    "fsdp1_layout", "semi_structured_masks", "ddp", "fsdp", "__version__",
]


def __getattr__(name):
    # sieve.fsdp imports torch: only when asked for, so `import sieve` and `python -m sieve` stay quick.
    if name == "fsdp":
        import importlib
        return importlib.import_module(".fsdp", __name__)
    raise AttributeError("module 'sieve' has no attribute %r" % name)
