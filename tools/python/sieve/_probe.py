# SPDX-License-Identifier: Apache-2.0
"""Whether a copy of libnccl-net-sieve.so loads, and what it holds, found in a child process.

A child, not this process: loading runs the library's constructors and its dependencies' (hwloc), a
failed load must not leave half of it mapped here, and what the doctor reports is what a fresh job
process gets. The child is `python -I` (no current directory or PYTHONPATH on its path) and loads
exactly the given file, without LD_PRELOAD, so it sees the loader's view a job starts with.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from ._constants import _CAP_CUDA_COMPACT, _CAP_HOST_COMPACT, _CAP_PROXY, _CAP_VERBS

# sieve_capabilities()'s bits by the names the doctor, `--require` and sieve-info use, each with what a
# library without it lacks (tools/sieve-info/report.cc says the same).
CAPABILITIES = {
    "proxy": (_CAP_PROXY, "the collective proxy (built without CUDA: under LD_PRELOAD it intercepts no collective)"),
    "cuda-compact": (_CAP_CUDA_COMPACT,
                     "Sieve's CUDA gather/scatter (built without CUDA: sieve.ddp and sieve.fsdp use torch's)"),
    "host-compact": (_CAP_HOST_COMPACT, "Sieve's CPU gather/scatter (a library older than them)"),
    "verbs": (_CAP_VERBS, "the verbs transport (built without infiniband/verbs.h: TCP only)"),
}

_CHILD = r"""
import ctypes, json, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as error:
    print(json.dumps({"error": str(error)}))
    sys.exit(0)
lib.sieve_version.restype = ctypes.c_char_p
found = {"version": lib.sieve_version().decode()}
if hasattr(lib, "sieve_capabilities"):
    lib.sieve_capabilities.restype = ctypes.c_uint32
    found["capabilities"] = lib.sieve_capabilities()
print(json.dumps(found))
"""


class Probe:
    """What loading one file gave: loaded, version, capabilities (bits, None if the library does not
    say), error (the loader's message), missing (the libraries the loader did not find)."""

    def __init__(self, path: str, loaded: bool, version: str = "", capabilities: int | None = None,
                 error: str = "", missing: list[str] | None = None) -> None:
        self.path, self.loaded, self.version, self.capabilities = path, loaded, version, capabilities
        self.error, self.missing = error, missing or []

    def names(self) -> list[str]:
        """The capabilities it has, by name (empty when unknown)."""
        bits = self.capabilities or 0
        return [name for name, (bit, _) in CAPABILITIES.items() if bits & bit]

    def lacks(self) -> list[str]:
        """The capabilities it does not have (every one when it does not say)."""
        return [name for name in CAPABILITIES if name not in self.names()]

    def why_not_loaded(self) -> str:
        """One line: what the loader lacks, by name, rather than its raw message."""
        if self.missing:
            return ("it needs %s, which the dynamic loader does not find (install the package that holds it, "
                    "or add its directory to LD_LIBRARY_PATH)" % ", ".join(self.missing))
        glibc = re.search(r"version `(GLIBC_[0-9.]+)' not found", self.error)
        if glibc:
            return "it needs %s, newer than this system's C library" % glibc.group(1)
        return self.error


def missing_libraries(path: str, error: str) -> list[str]:
    """The shared libraries a failed load of path lacks: every `not found` line of ldd where ldd is
    installed (all of them at once), else the one the loader's message names."""
    found = []
    ldd = shutil.which("ldd")
    if ldd and os.path.isfile(path):
        try:
            listed = subprocess.run([ldd, path], capture_output=True, text=True, timeout=30).stdout
            found = re.findall(r"^\s*(\S+) => not found", listed, re.MULTILINE)
        except (OSError, subprocess.SubprocessError):
            pass
    named = re.match(r"(\S+?): cannot open shared object file", error)
    if not found and named and os.path.basename(named.group(1)) != os.path.basename(path):
        found = [named.group(1)]
    return found


def load_in_child(path: str, timeout: float = 60) -> Probe:
    """Loads path in a fresh `python -I` without LD_PRELOAD and reports what it got."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CHILD, path], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return Probe(path, False, error="loading it did not finish within %d s" % timeout)
    if done.returncode < 0:
        return Probe(path, False, error="loading it killed the process (signal %d)" % -done.returncode)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Probe(path, False, error="loading it failed: %s" % (done.stderr.strip()[-500:] or "no output"))
    if "error" in report:
        return Probe(path, False, error=report["error"], missing=missing_libraries(path, report["error"]))
    return Probe(path, True, version=report["version"], capabilities=report.get("capabilities"))


def parse_required(text: str) -> list[str]:
    """--require's list (comma-separated names); ValueError names an unknown one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in CAPABILITIES:
            raise ValueError("unknown capability %r (%s)" % (name, ", ".join(CAPABILITIES)))
    return names
