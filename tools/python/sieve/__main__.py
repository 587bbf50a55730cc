# SPDX-License-Identifier: Apache-2.0
"""python -m sieve: what a job needs to use Sieve, and a launcher that sets it.

    python -m sieve [info] [--json] [--require CAP[,CAP...]]
        the version; the library, loaded in a child process (why it cannot load, naming what the loader
        lacks; what it holds); whether it is preloaded here; the NCCL it would interpose; the variables
    python -m sieve run [--require CAP[,CAP...]] [--replace-plugin] -- COMMAND [ARGS...]
        runs COMMAND with NCCL_NET_PLUGIN (a path or the name, as the job's NCCL reads it) and
        LD_PRELOAD set to this installation's library
    python -m sieve --version
        the version and the build id (the commit the library was built from)

CAP, what sieve_capabilities() says the library holds: proxy (the collective proxy LD_PRELOAD needs;
CUDA builds), cuda-compact, host-compact, verbs. run refuses to replace another plugin the job's
NCCL_NET_PLUGIN names, unless --replace-plugin is given.

Exit status: 0 all well; 1 the library cannot be loaded, or lacks a capability --require names;
2 a usage error, no library, or another NCCL_NET_PLUGIN; run: the command's own status (126 it
cannot be executed, 127 it is not found).
"""

import ctypes
import errno
import json
import os
import shlex
import site
import sys
import sysconfig

from . import __version__
from ._launch import other_plugin, plugin_variables, preload
from ._library import SieveError, _loaded_path, library_path
from ._probe import CAPABILITIES, load_in_child, parse_required

RUN_USAGE = "usage: python -m sieve run [--require CAP[,CAP...]] [--replace-plugin] -- COMMAND [ARGS...]"


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


def environment(library, nccl=None, environ=None):
    """The variables a job sets to run with Sieve: NCCL_NET_PLUGIN as NCCL `nccl` reads it (with
    LD_LIBRARY_PATH where that is the name), LD_PRELOAD by absolute path."""
    environ = os.environ if environ is None else environ
    variables, _ = plugin_variables(library, nccl, environ)
    variables["LD_PRELOAD"] = preload(library, environ)
    return variables


def _job_nccl():
    """(path, version) of the NCCL a job here would load: the nvidia-nccl wheel's, else the system's."""
    nccl = _wheel_nccl()
    if nccl:
        return nccl, nccl_version(nccl)
    version = nccl_version("libnccl.so.2")
    return ("libnccl.so.2", version) if version else (None, None)


def _verdict(probe, required):
    """The one line that fails the doctor or the launcher, or None."""
    if not probe.loaded:
        return "%s cannot be loaded: %s" % (probe.path, probe.why_not_loaded())
    if required and probe.capabilities is None:
        return "%s does not say what it holds (no sieve_capabilities()): --require cannot be met" % probe.path
    for name in required:
        if name not in probe.names():
            return "--require %s: %s lacks %s" % (name, probe.path, CAPABILITIES[name][1])
    return None


def gather(required=()):
    """Everything the doctor reports, as one dict (its --json)."""
    report = {"version": __version__, "build_id": _build_id(), "package": os.path.dirname(os.path.abspath(__file__)),
              "library": None}
    try:
        library = library_path()
    except SieveError as error:
        report["error"] = str(error)
        return report
    probe = load_in_child(library)
    nccl, version = _job_nccl()
    variables, why = plugin_variables(library, version, os.environ)
    report.update(library=library, loads=probe.loaded, load_error=probe.error, missing=probe.missing,
                  library_version=probe.version, capabilities=probe.names() if probe.loaded else None,
                  lacks=probe.lacks() if probe.loaded else None, preloaded=_loaded_path(),
                  nccl={"path": nccl, "version": version}, plugin_form=why,
                  environment=environment(library, version), verdict=_verdict(probe, required))
    return report


def _print_text(report, out):
    print("sieve %s (%s)" % (report["version"], report["package"]), file=out)
    print("build: %s" % report["build_id"], file=out)
    if report["library"] is None:
        print("library: none: %s" % report["error"], file=out)
        return
    print("library: %s" % report["library"], file=out)
    if report["loads"]:
        print("loads: yes, in a fresh process (%s)" % report["library_version"], file=out)
        lacks = ["  lacks %s: %s" % (name, CAPABILITIES[name][1]) for name in report["lacks"]]
        print("capabilities: %s" % (", ".join(report["capabilities"]) or "none"), file=out)
        for line in lacks:
            print(line, file=out)
    else:
        print("loads: no: %s" % (report["missing"] and report["verdict"] or report["load_error"]), file=out)
    preloaded = report["preloaded"]
    print("preloaded in this process: %s" % (("yes, " + preloaded) if preloaded else "no"), file=out)
    nccl = report["nccl"]
    if nccl["path"]:
        print("NCCL it would interpose: %s (version %s)" % (nccl["path"], nccl["version"] or "unknown"), file=out)
    else:
        print("NCCL it would interpose: none found (no nvidia-nccl wheel here; the proxy takes whichever "
              "libnccl.so.2 the job loads)", file=out)
    print("environment to set (NCCL_NET_PLUGIN: %s):" % report["plugin_form"], file=out)
    for name, value in report["environment"].items():
        print("  export %s=%s" % (name, shlex.quote(value)), file=out)
    print("or launch with: python -m sieve run -- torchrun ...", file=out)


def _options(argv, flags, valued):
    """argv's options (flags: names alone; valued: names that take a value) and what follows them."""
    found, i = {}, 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        name, _, value = argv[i].partition("=")
        if name in flags and not value:
            found[name] = True
        elif name in valued:
            if not value:
                i += 1
                if i >= len(argv):
                    raise ValueError("%s needs a value" % name)
                value = argv[i]
            found[name] = value
        else:
            raise ValueError("unknown option %s" % argv[i])
        i += 1
    return found, argv[i + 1:] if argv[i:i + 1] == ["--"] else argv[i:]


def info(argv=(), out=sys.stdout):
    try:
        options, rest = _options(list(argv), ("--json",), ("--require",))
        if rest:
            raise ValueError("unexpected %s" % rest[0])
        required = parse_required(options.get("--require", ""))
    except ValueError as error:
        print("python -m sieve: %s" % error, file=sys.stderr)
        return 2
    report = gather(required)
    if options.get("--json"):
        print(json.dumps(report, indent=2), file=out)
    else:
        _print_text(report, out)
    if report["library"] is None:
        return 2
    if report["verdict"]:
        print("python -m sieve: %s" % report["verdict"], file=sys.stderr)
        return 1
    return 0


def run(argv):
    try:
        options, command = _options(list(argv), ("--replace-plugin", "--help", "-h"), ("--require",))
        required = parse_required(options.get("--require", ""))
    except ValueError as error:
        print("sieve run: %s\n%s" % (error, RUN_USAGE), file=sys.stderr)
        return 2
    if options.get("--help") or options.get("-h"):
        print(RUN_USAGE + "\n\n" + __doc__.split("\n\n", 2)[2].strip())
        return 0
    if not command:
        print(RUN_USAGE, file=sys.stderr)
        return 2
    try:
        library = library_path()
    except SieveError as error:
        print("sieve run: %s" % error, file=sys.stderr)
        return 2
    other = other_plugin(os.environ)
    if other and not options.get("--replace-plugin"):
        print("sieve run: NCCL_NET_PLUGIN=%s is set: running with Sieve would replace that net plugin; unset it, "
              "or pass --replace-plugin" % other, file=sys.stderr)
        return 2
    probe = load_in_child(library)
    verdict = _verdict(probe, required)
    if verdict:
        print("sieve run: %s" % verdict, file=sys.stderr)
        return 1
    if "proxy" not in probe.names():
        print("sieve run: warning: %s lacks %s; the net plugin still works" % (library, CAPABILITIES["proxy"][1]),
              file=sys.stderr)
    env = dict(os.environ)
    env.update(environment(library, _job_nccl()[1]))
    return _exec(command, env)


def _exec(command, env):
    try:
        os.execvpe(command[0], command, env)
    except OSError as error:
        print("sieve run: cannot run %s: %s" % (command[0], error.strerror), file=sys.stderr)
        # As a shell: found but not executable is 126, not found 127.
        return 127 if error.errno == errno.ENOENT else 126


def main(argv):
    if not argv or argv[0] == "info" or argv[0] in ("--json", "--require") or argv[0].startswith("--require="):
        return info(argv[1:] if argv[:1] == ["info"] else argv)
    if argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv[0] == "run":
        return run(argv[1:])
    if argv[0] in ("-V", "--version"):
        print("%s (build %s)" % (__version__, _build_id()))
        return 0
    print("python -m sieve: unknown command %r (info, run -- COMMAND, --version)" % argv[0], file=sys.stderr)
    return 2


def entry():
    """The `sieve` command a wheel installs."""
    try:
        status = main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (python -m sieve | head -1): nothing left to say, and no traceback. Python
        # would flush stdout again at exit and fail once more; point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    entry()
