# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libnccl-net-sieve.so, and the C API's structs (sieve.h)."""

from __future__ import annotations

import ctypes
import logging
import os

from ._constants import _ERR_INVALID, _ERR_UNAVAILABLE

_LIBRARY_NAME = "libnccl-net-sieve.so"


class SieveError(RuntimeError):
    """A failed call: code is the negative SIEVE_ERR_* value."""
    __module__ = "sieve"  # its public name, in tracebacks too: sieve.SieveError

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _MaskInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("mask_id", ctypes.c_uint64), ("count", ctypes.c_uint64),
                ("kept", ctypes.c_uint64), ("hash", ctypes.c_uint64), ("dtype", ctypes.c_int)]


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "bytes_logical_sent", "bytes_wire_sent", "bytes_logical_received", "bytes_wire_received",
        "messages_sent", "messages_received", "collectives_dense", "collectives_compacted",
        "mask_violations", "connections_rejected", "masks_published", "tables_activated",
        "tables_refused", "learned_calls_observed", "learned_bytes_saved", "learned_pattern_changes")]


class _CommitResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("state", ctypes.c_int), ("commit", ctypes.c_uint64),
                ("masks", ctypes.c_uint64), ("compacting", ctypes.c_uint64), ("reason", ctypes.c_char * 256)]


def _loaded_path() -> str | None:
    """The path of the Sieve library already mapped into this process (LD_PRELOAD), if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5]) == _LIBRARY_NAME:
                    return fields[5]
    except OSError:
        pass
    return None


def _find_library() -> str:
    """The copy that LD_PRELOAD loaded always wins: masks published into any other copy would never
    reach the proxy, and the job would silently run dense. SIEVE_LIBRARY names a copy to load when
    none is loaded (tools and tests that use the C API without the proxy): a path, or, as LD_PRELOAD
    takes, a name without a slash that the dynamic loader finds (LD_LIBRARY_PATH, ldconfig's cache)."""
    loaded = _loaded_path()
    wanted = os.environ.get("SIEVE_LIBRARY")
    by_name = bool(wanted) and "/" not in wanted
    if loaded:
        # A name means what the loader would give for it, and the loader gives the copy already
        # loaded under that name; a path must be that copy's file.
        if by_name:
            same = os.path.basename(loaded) == wanted
        else:
            same = not wanted or os.path.realpath(wanted) == os.path.realpath(loaded)
        if not same:
            raise SieveError(_ERR_INVALID, "SIEVE_LIBRARY=%s, but another copy of Sieve is already loaded (%s): masks "
                                           "published there would never reach the proxy. Unset SIEVE_LIBRARY or "
                                           "point it at the loaded copy" % (wanted, loaded))
        return loaded
    if by_name:
        return wanted  # ctypes.CDLL hands a bare name to the loader's search, as LD_PRELOAD does
    if wanted:
        if not os.path.isfile(wanted):
            raise SieveError(_ERR_INVALID, "SIEVE_LIBRARY=%s: no such file" % wanted)
        return wanted
    # By path where this installation has a copy: a wheel's is on no loader path, so its name alone
    # would not preload it.
    try:
        preload = library_path()
    except SieveError:
        preload = _LIBRARY_NAME
    raise SieveError(_ERR_UNAVAILABLE, "%s is not loaded in this process: start the job with python -m sieve run -- "
                                       "COMMAND, or LD_PRELOAD=%s (the collective proxy works only preloaded), or "
                                       "set SIEVE_LIBRARY (a path or a name) to use the C API alone"
                     % (_LIBRARY_NAME, preload))


def _editable_copy(here: str) -> str | None:
    """After `pip install -e .` the package runs from the checkout (here), and the library its build
    installed lies in site-packages/sieve/, where no module of the package is: the distribution's own
    record says where, if it is an editable install of the checkout that holds this package."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse
    try:
        found = metadata.distribution("nccl-net-sieve")
        origin = json.loads(found.read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    url = urlparse(origin.get("url", ""))
    if not origin.get("dir_info", {}).get("editable") or url.scheme != "file":
        return None
    checkout = os.path.realpath(unquote(url.path))
    if os.path.commonpath([checkout, os.path.realpath(here)]) != checkout:
        return None  # an editable install of another checkout
    return os.path.abspath(str(found.locate_file("sieve/" + _LIBRARY_NAME)))


def _package_copy() -> str | None:
    """The copy this installation of the package carries: inside the package (a wheel), else the one
    `cmake --install` or the .deb put beside it (recorded, relative to the package, in _installed.py),
    else the one an editable install of this checkout built."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, _LIBRARY_NAME)]
    try:
        from . import _installed
        candidates.append(os.path.normpath(os.path.join(here, _installed.LIBRARY)))
    except ImportError:  # a source checkout or a wheel: no install record
        pass
    found = next((candidate for candidate in candidates if os.path.isfile(candidate)), None)
    if found is None:
        editable = _editable_copy(here)
        found = editable if editable and os.path.isfile(editable) else None
    return found


def library_path() -> str:
    """The libnccl-net-sieve.so this installation of the package goes with, by absolute path: the copy a
    wheel carries inside the package (pip install), else the one `cmake --install` or the .deb put beside
    it (recorded, relative to the package, in _installed.py at install time), else $SIEVE_LIBRARY (a
    build tree). It only finds the file; library() loads the copy that is preloaded, or $SIEVE_LIBRARY."""
    found = _package_copy()
    if found:
        return found
    wanted = os.environ.get("SIEVE_LIBRARY")
    if wanted and os.path.isfile(wanted):
        return os.path.abspath(wanted)
    here = os.path.dirname(os.path.abspath(__file__))
    raise SieveError(_ERR_UNAVAILABLE, "no %s goes with this sieve package (%s): install it with pip install "
                                       ". from a checkout's root, or set SIEVE_LIBRARY to a built copy"
                     % (_LIBRARY_NAME, here))


def _open(path: str) -> ctypes.CDLL:
    """Loads the library at path (or by name) and declares the C API's signatures."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        from ._probe import missing_libraries
        missing = missing_libraries(path, str(e))
        if missing and os.path.basename(missing[0]) != os.path.basename(path):
            advice = "it needs %s, which the dynamic loader does not find: install the package that holds it, or " \
                     "add its directory to LD_LIBRARY_PATH" % ", ".join(missing)
        else:
            advice = "give its path, or add its directory to LD_LIBRARY_PATH"
        raise SieveError(_ERR_INVALID, "SIEVE_LIBRARY=%s: the dynamic loader cannot load it (%s); %s"
                         % (path, e, advice)) from None
    lib.sieve_version.restype = ctypes.c_char_p
    lib.sieve_build_id.restype = ctypes.c_char_p
    lib.sieve_strerror.restype = ctypes.c_char_p
    lib.sieve_strerror.argtypes = [ctypes.c_int]
    lib.sieve_last_error.restype = ctypes.c_char_p
    # The _for variants take the length of bits and refuse a short array (sieve.h); comm NULL publishes
    # for every communicator, which is what the binding means.
    lib.sieve_mask_publish_for.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
    lib.sieve_mask_publish_ranges_for.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
    lib.sieve_collective_mask_publish_for.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                                                      ctypes.c_char_p, ctypes.c_size_t,
                                                      ctypes.POINTER(ctypes.c_uint64)]
    lib.sieve_mask_retract.argtypes = [ctypes.c_void_p]
    lib.sieve_mask_retract_id.argtypes = [ctypes.c_uint64]
    lib.sieve_mask_released.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    lib.sieve_commit_arm.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.sieve_commit_outcome.argtypes = [ctypes.c_void_p, ctypes.POINTER(_CommitResult)]
    lib.sieve_mask_query.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MaskInfo)]
    lib.sieve_stats_get.argtypes = [ctypes.POINTER(_Stats)]
    # sieve._kernels' gather and scatter (absent from a library older than they are)
    if hasattr(lib, "sieve_compact_gather"):
        lib.sieve_capabilities.restype = ctypes.c_uint32
        lib.sieve_compact_tile_elements.restype = ctypes.c_uint64
        for name in ("sieve_compact_gather", "sieve_compact_scatter"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                           ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


# The one copy of the library this process uses, loaded once: two copies would keep two mask registries
# and two sets of counters, and masks published into one would never reach the proxy of the other.
# _lib_path is what it was loaded from; _lib_is_package_copy says that the kernels loaded it without
# asking _find_library (library() then checks SIEVE_LIBRARY against it: it is the copy mapped now).
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None
_lib_is_package_copy = False


def library() -> ctypes.CDLL:
    """The C library (found once: the preloaded copy, else $SIEVE_LIBRARY; where sieve._kernels already
    loaded the package's copy, that copy, which is the loaded one)."""
    global _lib, _lib_path, _lib_is_package_copy
    if _lib is None or _lib_is_package_copy:
        found = _find_library()  # once the kernels loaded the package's copy, that is the loaded copy
        if _lib is None:
            _lib, _lib_path = _open(found), found
        _lib_is_package_copy = False
    return _lib


# Whether this process was told that Sieve is absent: once, since a training loop calls stats() and
# publish_pruned_model() every step, and one line says all there is to say.
_absence_said = False


def _present() -> ctypes.CDLL | None:
    """library(), or None where Sieve is not in this process at all: nothing preloaded, no SIEVE_LIBRARY
    (a job rolled back by taking Sieve out of its launch). The calls a training script makes then do
    nothing, so that undoing Sieve changes no line of the script; the "sieve" logger says so once.
    A SIEVE_LIBRARY that does not load, or names another copy than the loaded one, still raises: that
    is a mistake in the launch, not a rollback."""
    global _absence_said
    try:
        return library()
    except SieveError as error:
        if error.code != _ERR_UNAVAILABLE:
            raise
    if not _absence_said:
        _absence_said = True
        logging.getLogger("sieve").warning(
            "sieve: %s is not loaded in this process (no LD_PRELOAD, no SIEVE_LIBRARY): sieve's mask calls do "
            "nothing, commits are refused and sieve.stats() reads zeros; the job runs as without Sieve", _LIBRARY_NAME)
    return None


def _library_or_package_copy() -> ctypes.CDLL | None:
    """What sieve._kernels runs on: library()'s copy, else, with none preloaded and no SIEVE_LIBRARY, the
    copy this package carries (the DDP hook needs no LD_PRELOAD); None when there is none, or it does
    not load. The same order and the same object as library(), so a process never maps two copies: once
    the package's copy is loaded, library() finds it loaded and returns it (and refuses a SIEVE_LIBRARY
    naming another copy, as for a preloaded one)."""
    global _lib, _lib_path, _lib_is_package_copy
    if _lib is not None:
        return _lib
    try:
        return library()
    except SieveError as error:
        if error.code != _ERR_UNAVAILABLE:
            return None
    found = _package_copy()
    if found is None:
        return None
    try:
        _lib = _open(found)
    except SieveError:
        return None
    _lib_path, _lib_is_package_copy = found, True
    return _lib


def _check(code: int) -> None:
    if code != 0:
        lib = library()
        raise SieveError(code, "%s: %s" % (lib.sieve_strerror(code).decode(), lib.sieve_last_error().decode()))
