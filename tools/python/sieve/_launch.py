# SPDX-License-Identifier: Apache-2.0
"""The variables `python -m sieve run` sets: NCCL_NET_PLUGIN as the job's NCCL reads it, LD_PRELOAD.

How NCCL reads NCCL_NET_PLUGIN, from its sources (github.com/NVIDIA/nccl, at the release tags):
- 2.19 and 2.20 (src/net.cc): only dlopen("libnccl-net-<value>.so"), cut to 128 bytes; a path as the
  value never loads.
- 2.21 to 2.25 (src/net.cc): the value as given first (so a path loads), then libnccl-net-<value>.so.
- 2.26 (src/plugin/plugin_open.cc): the same, the value cut to 254 characters (snprintf into 255).
- 2.27 to 2.30 (src/plugin/net.cc): a comma-separated list whose entries of 255 characters or more
  are ignored ("longer than 255 characters, ignoring it"), each opened as in 2.26; 2.28 added "none".
So a path is used where the NCCL is 2.21 or later, the path fits in 254 characters and holds no
comma; elsewhere (an older NCCL, one whose version is unknown, a long path) the value is the name
"sieve", and the library's directory goes first on LD_LIBRARY_PATH so that NCCL's dlopen of
libnccl-net-sieve.so finds this copy (under LD_PRELOAD it gets the preloaded copy, whose SONAME that is).
"""

from __future__ import annotations

import os

LIBRARY_NAME = "libnccl-net-sieve.so"
_PATH_FROM = (2, 21)  # the first NCCL that dlopens the value as given
_LONGEST = 254  # 2.26's cut, 2.27's limit (an entry must leave room for its NUL in 255 bytes)


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in version.split(".")[:2]) if version else None
    except ValueError:
        return None


def plugin_variables(library: str, nccl: str | None, environ: dict[str, str]) -> tuple[dict[str, str], str]:
    """NCCL_NET_PLUGIN (and, by name, LD_LIBRARY_PATH) that make NCCL `nccl` ("2.28.9", None: unknown)
    load `library`, and why that form, in words."""
    version = _version_tuple(nccl)
    named_right = os.path.basename(library) == LIBRARY_NAME
    if version is not None and version >= _PATH_FROM and len(library) <= _LONGEST and "," not in library:
        return {"NCCL_NET_PLUGIN": library}, "a path, which NCCL %s loads as given" % nccl
    if not named_right:  # the name "sieve" cannot reach a file named otherwise: the path is all there is
        return {"NCCL_NET_PLUGIN": library}, "a path (the file is not named %s)" % LIBRARY_NAME
    if version is None:
        why = "the name, which every NCCL loads (its version is unknown here)"
    elif version < _PATH_FROM:
        why = "the name: NCCL %s loads only libnccl-net-<value>.so" % nccl
    else:
        why = "the name: the path is too long for NCCL (%d characters, %d at most) or holds a comma" % (
            len(library), _LONGEST)
    directory = os.path.dirname(library)
    searched = [directory] + [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d and d != directory]
    return {"NCCL_NET_PLUGIN": "sieve", "LD_LIBRARY_PATH": ":".join(searched)}, why


def names_sieve(value: str) -> bool:
    """Whether an NCCL_NET_PLUGIN value already means Sieve (by name or any copy's path)."""
    return value in ("sieve", LIBRARY_NAME) or os.path.basename(value) == LIBRARY_NAME


def other_plugin(environ: dict[str, str]) -> str | None:
    """The job's NCCL_NET_PLUGIN when it names another plugin than Sieve (which run would replace)."""
    value = environ.get("NCCL_NET_PLUGIN", "")
    if not value:
        return None
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    return None if entries and all(names_sieve(entry) for entry in entries) else value


def preload(library: str, environ: dict[str, str]) -> str:
    """LD_PRELOAD with this library first and any other copy of Sieve taken out."""
    kept = [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if os.path.basename(p) != LIBRARY_NAME]
    return ":".join([library] + kept)
