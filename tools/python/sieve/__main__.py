# SPDX-License-Identifier: Apache-2.0
"""python -m sieve: what a job needs to use Sieve, and a launcher that sets it.

    python -m sieve                      version, library, preload state, the NCCL it would interpose
    python -m sieve run -- torchrun ...  runs the command with NCCL_NET_PLUGIN and LD_PRELOAD set
    python -m sieve --version            the version and the build id (the commit the library was built from)

Exit status: 0; 2 for a usage error or no library to point at; run: the command's own status.
"""

import ctypes
import os
import shlex
import site
import sys
import sysconfig

from . import __version__
from ._library import SieveError, _loaded_path, library_path


def _build_id():
    """The build id CMake recorded beside the package (a wheel's _build.py, cmake --install's _installed.py):
    the same as the library's sieve_build_id(), read without loading the library."""
    import importlib
    for record in ("._build", "._installed"):
        try:
            return str(importlib.import_module(record, __package__).BUILD_ID)
        except (ImportError, AttributeError):  # a checkout, or a record older than BUILD_ID
            pass
    return "unknown"


def _site_directories():
    """The installed environment's site-packages directories, absolute and resolved. Not sys.path: under
    `python -m` it starts with the current directory, and a library found there would run its
    constructor when loaded (a file planted where an operator runs this doctor would run code)."""
    found = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    found += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    resolved = []
    for directory in found:
        real = os.path.realpath(directory)
        if os.path.isabs(directory) and os.path.isdir(real) and real not in resolved:
            resolved.append(real)
    return resolved


def _wheel_nccl():
    """libnccl.so.2 of the nvidia-nccl wheel PyTorch's pip wheels depend on, if installed in this
    environment (found without importing torch: it is what libtorch_cuda.so loads through its RUNPATH),
    as a resolved absolute path inside one of the environment's site-packages directories."""
    for root in _site_directories():
        candidate = os.path.realpath(os.path.join(root, "nvidia", "nccl", "lib", "libnccl.so.2"))
        # The resolved file must still be inside the environment: a symbolic link out of it is not the wheel's.
        if os.path.commonpath([candidate, root]) == root and os.path.isfile(candidate):
            return candidate
    return None


def nccl_version(path):
    """NCCL's ncclGetVersion() of the library at path, as "2.28.9", or None (no GPU needed)."""
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    major, rest = divmod(code.value, 10000)  # NCCL >= 2.9: major * 10000 + minor * 100 + patch
    minor, patch = divmod(rest, 100)
    return "%d.%d.%d" % (major, minor, patch)


def environment(library):
    """The variables a job sets to run with Sieve: both faces, by absolute path."""
    preload = os.environ.get("LD_PRELOAD", "")
    kept = [p for p in preload.replace(":", " ").split() if os.path.basename(p) != os.path.basename(library)]
    return {"NCCL_NET_PLUGIN": library, "LD_PRELOAD": ":".join([library] + kept)}


def info(out=sys.stdout):
    print("sieve %s (%s)" % (__version__, os.path.dirname(os.path.abspath(__file__))), file=out)
    print("build: %s" % _build_id(), file=out)
    try:
        library = library_path()
    except SieveError as error:
        print("library: none: %s" % error, file=out)
        return 2
    print("library: %s" % library, file=out)
    loaded = _loaded_path()
    print("preloaded in this process: %s" % (("yes, " + loaded) if loaded else "no"), file=out)
    nccl = _wheel_nccl()
    if nccl:
        print("NCCL it would interpose: %s (version %s)" % (nccl, nccl_version(nccl) or "unknown"), file=out)
    else:
        print("NCCL it would interpose: none found (no nvidia-nccl wheel here; the proxy takes whichever "
              "libnccl.so.2 the job loads)", file=out)
    print("environment to set:", file=out)
    for name, value in environment(library).items():
        print("  export %s=%s" % (name, shlex.quote(value)), file=out)
    print("or launch with: python -m sieve run -- torchrun ...", file=out)
    return 0


def run(command):
    if not command:
        print("usage: python -m sieve run -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        library = library_path()
    except SieveError as error:
        print("sieve run: %s" % error, file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.update(environment(library))
    try:
        os.execvpe(command[0], command, env)
    except OSError as error:
        print("sieve run: cannot run %s: %s" % (command[0], error.strerror), file=sys.stderr)
        return 127


def main(argv):
    if not argv or argv == ["info"]:
        return info()
    if argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv[0] == "run":
        rest = argv[1:]
        return run(rest[1:] if rest[:1] == ["--"] else rest)
    if argv[0] in ("-V", "--version"):
        print("%s (build %s)" % (__version__, _build_id()))
        return 0
    print("python -m sieve: unknown command %r (info, run -- COMMAND, --version)" % argv[0], file=sys.stderr)
    return 2


def entry():
    """The `sieve` command a wheel installs."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
